# A control plane's stand-in for docker/compose.yaml: the Python client
# (clients/python) sending clients/python/example.py's rounds in a loop,
# once the service says it is ready.
ARG BASE_IMAGE=debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-zmq python3-flatbuffers flatbuffers-compiler && rm -rf /var/lib/apt/lists/*
COPY schemas/placement.fbs /opt/placer/schemas/
COPY clients/python /opt/placer/clients/python
COPY docker/control_plane.py /opt/placer/
RUN flatc --python --gen-object-api -o /opt/placer/wire /opt/placer/schemas/placement.fbs && chmod -R a+rX /opt/placer
ENV PYTHONPATH=/opt/placer/clients/python:/opt/placer/wire
RUN useradd --system --uid 10002 --no-create-home control-plane
USER control-plane
ENTRYPOINT ["python3", "/opt/placer/control_plane.py"]
