# The Placer scheduler for Kubernetes alone (adapters/kubernetes): a small
# image for deploy/helm/placer's and deploy/kubernetes's scheduler
# Deployment, tagged with the project's version (make images), never `latest`.
#
#   docker build -f docker/scheduler.Dockerfile -t placer-k8s-scheduler:0.1.0 .
#
# Go with cgo (the scheduler links libzmq for ZMTP/CURVE to placer serve);
# the wire code is generated from the one schema by flatc --go, as
# adapters/kubernetes/CMakeLists.txt does. docker/image-test.sh builds it on
# a debootstrap'd base and runs the Deployment's command in it.
ARG BUILD_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS go

FROM ${BUILD_IMAGE} AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      gcc libc6-dev pkg-config libzmq3-dev flatbuffers-compiler ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=go /usr/local/go /usr/local/go
WORKDIR /src
ARG GOPROXY=https://proxy.golang.org,direct
ARG SSL_CERT_FILE
COPY adapters/kubernetes/go.mod adapters/kubernetes/go.sum adapters/kubernetes/
RUN cd adapters/kubernetes && /usr/local/go/bin/go mod download
COPY schemas/placement.fbs schemas/
COPY adapters/kubernetes adapters/kubernetes
RUN rm -rf adapters/kubernetes/internal/wire/gen \
      && flatc --go --gen-object-api -o adapters/kubernetes/internal/wire/gen schemas/placement.fbs \
      && cd adapters/kubernetes && CGO_ENABLED=1 /usr/local/go/bin/go build -buildvcs=false -trimpath \
           -ldflags=-s -o /out/placer-k8s-scheduler ./cmd/placer-k8s-scheduler

FROM ${RUNTIME_IMAGE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libzmq5 ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/placer-k8s-scheduler /usr/local/bin/placer-k8s-scheduler
# Not root: the scheduler needs no privilege (the chart runs it as 10001).
RUN useradd --system --uid 10001 --no-create-home placer
USER placer
EXPOSE 9556
ENTRYPOINT ["/usr/local/bin/placer-k8s-scheduler"]
