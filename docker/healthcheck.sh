#!/bin/sh
# HEALTHCHECK: `placer health` over the service's own socket; with CURVE it
# needs a client key the server lists (/keys/clients/health.key, whose secret
# is /keys/health.key_secret: placer keygen --out /keys --name health, then
# copy health.key into /keys/clients). Ready, not only alive: a worker
# stuck past --stuck-ms makes the container unhealthy.
endpoint=$(echo "${PLACER_ENDPOINT:-tcp://0.0.0.0:5555}" | sed 's#//0\.0\.0\.0:#//127.0.0.1:#')
set -- --ready --quiet --endpoint "$endpoint" --timeout-ms 3000
if [ -f /keys/server.key_secret ]; then
  set -- "$@" --server-key /keys/server.key --client-cert /keys/health.key_secret
fi
/usr/local/bin/placer health "$@"
rc=$?
# 5: ready but degraded (a worker on its CPU fallback after a GPU fault): it
# serves, as /readyz says; the fault is in the logs, /metrics and placer health.
[ "$rc" -eq 5 ] && exit 0
exit "$rc"
