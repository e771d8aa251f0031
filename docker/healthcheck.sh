#!/bin/sh
# HEALTHCHECK: `placer health` over the service's own socket; with CURVE it
# needs a client key the server lists (/keys/clients/health.key, whose secret
# is /keys/health.key_secret: placer keygen --out /keys --name health, then
# copy health.key into /keys/clients). Ready, not only alive: a worker
# stuck past --stuck-ms makes the container unhealthy.
endpoint=$(echo "${PLACER_ENDPOINT:-tcp://0.0.0.0:5555}" | sed 's#//0\.0\.0\.0:#//127.0.0.1:#')
if [ -f /keys/server.key_secret ]; then
  exec /usr/local/bin/placer health --ready --quiet --endpoint "$endpoint" --timeout-ms 3000 \
    --server-key /keys/server.key --client-cert /keys/health.key_secret
fi
exec /usr/local/bin/placer health --ready --quiet --endpoint "$endpoint" --timeout-ms 3000
