#!/usr/bin/env python3
"""A control plane's stand-in: waits until Placer says it is ready (the
readiness probe, a HealthRequest), then plays clients/python/example.py's
rounds every --interval seconds, printing one line per pass. Exits non-zero
if the service stops answering for longer than --give-up seconds."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from placer_client import Client, ClientError


def ready(endpoints: str) -> bool:
    """Whether one of the replicas ("a,b") says it is ready."""
    for endpoint in endpoints.split(","):
        try:
            with Client(endpoint, timeout_ms=1000) as client:
                if client.health().ready:
                    return True
        except ClientError:
            pass
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=os.environ.get("PLACER_ENDPOINT", "tcp://127.0.0.1:5555"))
    parser.add_argument("--interval", type=float, default=float(os.environ.get("ROUND_INTERVAL", "5")))
    parser.add_argument("--passes", type=int, default=int(os.environ.get("PASSES", "0")), help="0 = forever")
    parser.add_argument("--give-up", type=float, default=60)
    args = parser.parse_args()
    example = os.path.join(os.path.dirname(__file__), "clients", "python", "example.py")
    done = 0
    while args.passes == 0 or done < args.passes:
        since = time.monotonic()
        while not ready(args.endpoint):
            if time.monotonic() - since > args.give_up:
                print(f"control-plane: {args.endpoint} not ready for {args.give_up:.0f} s", flush=True)
                return 1
            time.sleep(1)
        run = subprocess.run([sys.executable, example, "--endpoint", args.endpoint], capture_output=True, text=True)
        done += 1
        status = "ok" if run.returncode == 0 else f"failed ({run.returncode}): {run.stderr.strip()[-200:]}"
        print(f"control-plane: pass {done}: example rounds {status}", flush=True)
        if run.returncode != 0:
            return run.returncode
        time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
