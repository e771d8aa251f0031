#!/usr/bin/python3
"""What one peer can hold of a running `placer serve` (issue 51's probes, at
full scale, from outside the process).

    scripts/transport-probe.py --placer build/placer [--curve] [--idle 4100] [--multipart 24] [--nonreader 60000]

Starts its own `placer serve --max-message-mib 1 --max-queue-mib 1` (the
budget: 2 MiB) on a free loopback port, then, one at a time:

  multipart  N connections each send one whole 1 MiB frame with MORE set and
             go quiet: the server's RSS over the next seconds, and how many
             of the connections it closed (message timeout: 30 s, so 40 s).
  idle       N connections finish the NULL handshake (CURVE: send the
             greeting, half-open) and sit idle; then `placer health` must be
             answered within 5 s.
  nonreader  one connection sends N bad 24-byte requests (each answered
             with an error) and never reads: the server must close the TCP
             connection.

Prints one line per probe and a JSON summary (--json FILE). Uses only the
standard library; the server's own client (`placer health`) is the
legitimate one.
"""
import argparse
import json
import os
import socket
import subprocess
import tempfile
import time


def greeting(mechanism):
    g = bytearray(64)
    g[0] = 0xFF
    g[8] = 1
    g[9] = 0x7F
    g[10] = 3
    g[11] = 1
    g[12:12 + len(mechanism)] = mechanism.encode()
    return bytes(g)


def frame(flags, body):
    if len(body) <= 255:
        return bytes([flags, len(body)]) + body
    return bytes([flags | 2]) + len(body).to_bytes(8, "big") + body


def ready_dealer():
    name = b"Socket-Type"
    return frame(4, b"\x05READY" + bytes([len(name)]) + name + (6).to_bytes(4, "big") + b"DEALER")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def connect(port, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def null_handshake(port):
    s = connect(port)
    s.sendall(greeting("NULL") + ready_dealer())
    got = b""
    while len(got) < 64 + 2:  # the server's greeting and at least READY's header
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        got += chunk
    return s


def closed(s, seconds):
    """Whether the server closes `s` within `seconds`, reading what it sent."""
    s.settimeout(0.2)
    until = time.time() + seconds
    while time.time() < until:
        try:
            chunk = s.recv(65536)
            if not chunk:
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def health(placer, endpoint, extra):
    t0 = time.time()
    r = subprocess.run([placer, "health", "--endpoint", endpoint, "--timeout-ms", "5000"] + extra,
                       capture_output=True, text=True, timeout=30)
    return r.returncode == 0, time.time() - t0


def raise_nofile(n):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--placer", default="build/placer")
    ap.add_argument("--curve", action="store_true", help="the server speaks CURVE (keys made in a temporary dir)")
    ap.add_argument("--multipart", type=int, default=24)
    ap.add_argument("--idle", type=int, default=4100)
    ap.add_argument("--nonreader", type=int, default=60000)
    ap.add_argument("--json")
    a = ap.parse_args()
    raise_nofile(2 * a.idle + 512)
    keys = tempfile.mkdtemp(prefix="placer-probe-")
    serve = [a.placer, "serve", "--endpoint", "tcp://127.0.0.1:0", "--backend", "cpu", "--quiet", "--http", "127.0.0.1:9611",
             "--max-message-mib", "1", "--max-queue-mib", "1"]
    client = []
    if a.curve:
        for name in ("server", "client"):
            subprocess.run([a.placer, "keygen", "--out", keys, "--name", name], check=True, capture_output=True)
        os.makedirs(f"{keys}/allowed")
        os.rename(f"{keys}/client.key", f"{keys}/allowed/client.key")
        serve += ["--curve-secret", f"{keys}/server.key_secret", "--allow-keys", f"{keys}/allowed"]
        client = ["--server-key", f"{keys}/server.key", "--client-cert", f"{keys}/client.key_secret"]
    # A free port: bind, read it, let go (the server binds it next).
    probe_sock = socket.socket()
    probe_sock.bind(("127.0.0.1", 0))
    port = probe_sock.getsockname()[1]
    probe_sock.close()
    serve[3] = f"tcp://127.0.0.1:{port}"
    endpoint = serve[3]
    log = open(os.path.join(keys, "serve.log"), "w")
    srv = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT)
    summary = {"placer": a.placer, "curve": a.curve}
    try:
        for _ in range(100):
            if health(a.placer, endpoint, client)[0]:
                break
            time.sleep(0.1)
        base = rss_kib(srv.pid)
        summary["rss_start_kib"] = base

        # multipart
        held = []
        for _ in range(a.multipart):
            s = null_handshake(port) if not a.curve else None
            if s is None:
                break
            s.sendall(frame(1, b"x" * (1 << 20)))
            held.append(s)
        if held:
            peak = 0
            t0 = time.time()
            while time.time() - t0 < 5:
                peak = max(peak, rss_kib(srv.pid) - base)
                time.sleep(0.05)
            n_closed = sum(1 for s in held if closed(s, 40 if s is held[0] else 0.5))
            summary["multipart"] = {"connections": len(held), "rss_growth_kib": peak, "closed": n_closed}
            print(f"multipart: {len(held)} connections with 1 MiB frames (MORE) held; RSS grew {peak / 1024:.1f} MiB "
                  f"(budget 2 MiB); {n_closed} closed by the server")
            for s in held:
                s.close()

        # idle
        crowd = []
        failed = 0
        for _ in range(a.idle):
            try:
                if a.curve:
                    s = connect(port)
                    s.sendall(greeting("CURVE"))
                else:
                    s = null_handshake(port)
                crowd.append(s)
            except OSError:
                failed += 1
        time.sleep(1)
        ok, took = health(a.placer, endpoint, client)
        summary["idle"] = {"connections": len(crowd), "failed_to_open": failed, "client_answered": ok,
                           "client_s": round(took, 3)}
        print(f"idle: {len(crowd)} idle connections ({failed} failed to open); a client "
              f"{'was answered' if ok else 'was NOT answered'} in {took:.2f} s")
        for s in crowd:
            s.close()

        # nonreader
        if not a.curve:
            s = null_handshake(port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            one = frame(1, b"") + frame(0, b"\x7f" * 24)  # a bad request: each is answered with an error
            s.setblocking(False)
            sent = 0
            t0 = time.time()
            while sent < a.nonreader and time.time() - t0 < 60:
                try:
                    s.send(one)
                    sent += 1
                except BlockingIOError:
                    time.sleep(0.001)
                except OSError:
                    break
            s.setblocking(True)
            gone = closed(s, 20)
            summary["nonreader"] = {"requests_sent": sent, "closed": gone}
            print(f"nonreader: {sent} requests sent, none read; the server "
                  f"{'closed the connection' if gone else 'did NOT close the connection'}")
            s.close()
        summary["rss_end_kib"] = rss_kib(srv.pid)
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
