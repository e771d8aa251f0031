#!/usr/bin/env python3
"""What applying a cycle's placements costs, by the way it talks to Slurm.

Issue 20: the bridge's own time per cycle is a few milliseconds, and the
Slurm CLI is 95-99% of a cycle (one `scontrol update` per placed job, then
one `scontrol release` for them all). This measures the alternatives on a
live local cluster (scripts/slurm-cluster.sh), each on a fresh batch of the
same held one-GPU jobs with the same node for each:

  scontrol         what the bridge does: N updates, one release of all
  libslurm-two     the same RPCs from libslurm (bench/slurm/apply_libslurm.c):
                   N updates, then N releases
  libslurm-one     one update RPC per job carrying the nodes and the release
  slurmrestd       22.05's REST API (v0.0.38): it cannot set ReqNodeList
                   (no such job property before v0.0.39), so this times N
                   comment updates and N releases (hold=false): the same
                   number of RPCs, a lower bound on what it would cost

Each batch is checked after it is applied: every job has the node it was
given (ReqNodeList) and is no longer held. Run as root, with SLURM_CONF set
(`scripts/slurm-cluster.sh up` prints it):

  sudo -E bench/slurm/apply_latency.py --jobs 90 --repeats 3 --out FILE.json
"""
import argparse
import http.client
import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REST_USER = "placer-rest"


def run(argv, user=None):
    if user is not None:
        argv = ["runuser", "-u", user, "--"] + argv
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"apply_latency: {' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def nodes():
    out = run(["sinfo", "-h", "-N", "-o", "%N"]).split()
    return sorted(set(out), key=lambda n: int(n.lstrip("n")) if n.lstrip("n").isdigit() else n)


def submit(n, user=None):
    ids = []
    for _ in range(n):
        ids.append(int(run(["sbatch", "-H", "--parsable", "-N1", "--gres=gpu:1", "-o", "/dev/null",
                            "--chdir", "/tmp", "--wrap", "sleep 600"], user).strip()))
    return ids


def cancel_all():
    ids = run(["squeue", "-h", "-o", "%A"]).split()
    if ids:
        run(["scancel"] + ids)
    for _ in range(100):
        if not run(["squeue", "-h", "-o", "%A"]).split():
            return
        time.sleep(0.2)
    sys.exit("apply_latency: jobs still queued 20 s after scancel")


def check(plan, rest=False):
    """Every job is released and has its node (slurmrestd cannot set one)."""
    bad = []
    for jid, node in plan:
        out = run(["scontrol", "-o", "show", "job", str(jid)])
        fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
        held = fields.get("Priority") == "0" or fields.get("Reason", "").startswith("JobHeld")
        if held or (not rest and fields.get("ReqNodeList") != node):
            bad.append(f"{jid}: Priority={fields.get('Priority')} ReqNodeList={fields.get('ReqNodeList')}")
    if bad:
        sys.exit("apply_latency: not applied: " + "; ".join(bad[:5]))


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def via_scontrol(plan, _):
    for jid, node in plan:
        run(["scontrol", "update", f"JobId={jid}", f"ReqNodeList={node}", "AdminComment=placer: placed"])
    run(["scontrol", "release", ",".join(str(j) for j, _ in plan)])
    return None, len(plan) + 1  # RPCs: scontrol's own business


def via_libslurm(mode):
    def apply(plan, ctx):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.writelines(f"{j} {n}\n" for j, n in plan)
        try:
            rpcs, _ = run([ctx["libslurm"], mode, f.name]).split()
        finally:
            os.unlink(f.name)
        return int(rpcs), 1
    return apply


class RestStalled(Exception):
    pass


def rest_post(sock, path, body, timeout_s=5.0):
    """One request on its own connection (slurmrestd 22.05 closes it after a
    reply); None when no reply came in timeout_s."""
    c = UnixHTTP(sock)
    try:
        c.connect()
        c.sock.settimeout(timeout_s)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    except socket.timeout:
        return None
    finally:
        c.close()


def via_slurmrestd(plan, ctx):
    # The jobs are REST_USER's: rest_auth/local acts for the socket's peer.
    # slurmrestd 22.05 now and then accepts a connection and never answers
    # it (seen once in ~700 requests); such a request is sent again, and
    # counted.
    rpcs = 0
    for body in ({"comment": "placer: placed"}, {"hold": False}):
        for jid, _ in plan:
            for _attempt in range(3):
                reply = rest_post(ctx["rest_sock"], f"/slurm/v0.0.38/job/{jid}", body)
                if reply is not None:
                    break
                ctx["rest_stalls"] = ctx.get("rest_stalls", 0) + 1
            else:
                raise RestStalled(f"slurmrestd answered no request in 3 tries of 5 s after {rpcs} replies")
            status, data = reply
            if status != 200:
                sys.exit(f"apply_latency: slurmrestd job {jid}: HTTP {status}: {data[:200]!r}")
            rpcs += 1
    return rpcs, 0


def start_slurmrestd(tmp):
    """slurmrestd refuses root: it runs as REST_USER, on a Unix socket."""
    try:
        pwd.getpwnam(REST_USER)
    except KeyError:
        run(["useradd", "-M", "-s", "/usr/sbin/nologin", REST_USER])
    conf_dir = os.path.dirname(os.environ["SLURM_CONF"])
    os.chmod(os.path.join(conf_dir, "munge"), 0o711)  # its socket, for a non-root client
    sock_dir = tempfile.mkdtemp(prefix="rest-", dir=tmp)
    os.chmod(tmp, 0o755)
    shutil.chown(sock_dir, REST_USER)
    sock = os.path.join(sock_dir, "sock")
    p = subprocess.Popen(["slurmrestd", "-a", "rest_auth/local", "-s", "openapi/v0.0.38", "-u", REST_USER,
                          f"unix:{sock}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(50):
        if os.path.exists(sock):
            return p, sock
        if p.poll() is not None:
            sys.exit(f"apply_latency: slurmrestd: {p.stderr.read().strip()}")
        time.sleep(0.1)
    p.kill()
    sys.exit("apply_latency: slurmrestd did not open its socket in 5 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=90)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="JSON file for the figures")
    a = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        sys.exit("apply_latency: set SLURM_CONF (scripts/slurm-cluster.sh up prints it)")
    names = nodes()
    if a.jobs > 8 * len(names):
        sys.exit(f"apply_latency: {a.jobs} one-GPU jobs do not fit {len(names)} nodes")

    tmp = tempfile.mkdtemp(prefix="placer-apply-")
    ctx = {"libslurm": os.path.join(tmp, "apply_libslurm")}
    run(["cc", "-O2", "-o", ctx["libslurm"], os.path.join(HERE, "apply_libslurm.c"), "-lslurm"])
    rest, ctx["rest_sock"] = start_slurmrestd(tmp)
    ways = [("scontrol", via_scontrol, None), ("libslurm-two", via_libslurm("two"), None),
            ("libslurm-one", via_libslurm("one"), None), ("slurmrestd", via_slurmrestd, REST_USER)]
    results = {w: [] for w, _, _ in ways}
    try:
        cancel_all()
        for rep in range(a.repeats):
            for way, apply, user in ways:
                ids = submit(a.jobs, user)
                plan = [(j, names[i % len(names)]) for i, j in enumerate(ids)]
                t0 = time.perf_counter()
                try:
                    rpcs, processes = apply(plan, ctx)
                except RestStalled as e:
                    # slurmrestd 22.05 can stop answering for good: the
                    # batch counts as failed, and a new one serves the next.
                    print(f"repeat {rep + 1}/{a.repeats} {way:13s} FAILED: {e}", flush=True)
                    results[way].append({"failed": str(e), "stalls": ctx.pop("rest_stalls", 0)})
                    cancel_all()
                    rest.kill()
                    rest.wait()
                    rest, ctx["rest_sock"] = start_slurmrestd(tmp)
                    continue
                dt = time.perf_counter() - t0
                check(plan, rest=way == "slurmrestd")
                cancel_all()
                results[way].append({"seconds": dt, "rpcs": rpcs, "processes": processes,
                                     "stalls": ctx.pop("rest_stalls", 0)})
                print(f"repeat {rep + 1}/{a.repeats} {way:13s} {dt * 1e3:8.1f} ms  {rpcs if rpcs is not None else '-'} RPCs  "
                      f"{processes} processes" + (f"  ({results[way][-1]['stalls']} stalled, sent again)"
                                                   if results[way][-1]["stalls"] else ""), flush=True)
    finally:
        rest.terminate()
        rest.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{a.jobs} placed one-GPU jobs on {len(names)} nodes, median of {a.repeats}:")
    print(f"{'way':13s} {'cycle ms':>9s} {'ms/job':>7s} {'RPCs':>5s}")
    summary = {}
    for way, runs in results.items():
        done = [r for r in runs if "seconds" in r]
        failed = len(runs) - len(done)
        if not done:
            summary[way] = {"failed": failed, "runs": runs}
            print(f"{way:13s} every batch failed")
            continue
        med = statistics.median(r["seconds"] for r in done)
        summary[way] = {"median_ms": med * 1e3, "ms_per_job": med * 1e3 / a.jobs, "failed": failed, "runs": runs}
        rpcs = done[0]["rpcs"] if done[0]["rpcs"] is not None else "-"
        print(f"{way:13s} {med * 1e3:9.1f} {med * 1e3 / a.jobs:7.2f} {rpcs:>5}" +
              (f"  ({failed} of {len(runs)} batches failed)" if failed else ""))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"jobs": a.jobs, "nodes": len(names), "slurm": run(["sinfo", "-V"]).strip(),
                       "ways": summary}, f, indent=1)


if __name__ == "__main__":
    main()
