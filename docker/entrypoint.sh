#!/bin/sh
# The image's entrypoint. With CURVE keys mounted at /keys (server.key_secret,
# and the allowed clients' public certificates in /keys/clients), the service
# encrypts and admits only those clients. Without them it serves in the clear,
# which `placer serve` allows on 0.0.0.0 only with --insecure: publish the
# port on the host's loopback then (docker run -p 127.0.0.1:5555:5555).
# Every other option comes as arguments or PLACER_* variables (placer serve
# --help), e.g. PLACER_HTTP=0.0.0.0:9555 for /metrics, /livez, /readyz.
set -e
endpoint="${PLACER_ENDPOINT:-tcp://0.0.0.0:5555}"
if [ -f /keys/server.key_secret ]; then
  exec /usr/local/bin/placer serve --endpoint "$endpoint" \
    --curve-secret /keys/server.key_secret --allow-keys /keys/clients "$@"
fi
echo "placer: no CURVE keys in /keys: serving without authentication; publish the port on 127.0.0.1 only" >&2
exec /usr/local/bin/placer serve --endpoint "$endpoint" --insecure "$@"
