#!/usr/bin/env python3
"""Placer behind Slurm against Slurm alone, on the same seeded job mix.

    sudo bench/slurm/side_by_side.py [--nodes 64] [--jobs 400 | --load 1.1] [--seed 1] [--out FILE.json]
                                     [--capture DIR] [--order fifo|pack|strict]

Starts a local Slurm cluster (scripts/slurm-cluster.sh: 8 GPUs a node, two
GPU models, racks of 16 nodes) and a Placer service, submits the job mix
held, and places it twice on fresh clusters:
  slurm   every job released at once: sched/backfill with cons_tres decides;
  placer  `placer slurm-bridge` cycles until a cycle places nothing more.
Jobs sleep long, so the state once placement settles is the packing each
scheduler chose. For each run: jobs and GPUs placed, GPUs left free on
partly used nodes (stranded for whole-node jobs), whole free nodes, gangs
within one rack, seconds from release to the last start, placements per
second, and for the bridge how a cycle split between Slurm's CLI and
Placer. Needs root and Slurm (scripts/install-deps.sh); run from the
repository with build/placer built.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLACER = os.environ.get("PLACER_BIN", os.path.join(ROOT, "build", "placer"))  # a copy keeps a rebuild out of a run
CLUSTER = os.path.join(ROOT, "scripts", "slurm-cluster.sh")
RACK = 16  # nodes a rack


def run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def job_mix(n, seed, gpus=0):
    """(nodes, GPUs a node, constraint) per job: mostly small jobs, some whole
    nodes, a few 2- and 4-node gangs of whole nodes, a few pinned to a model.
    n jobs, or with gpus > 0 as many as it takes to ask for that many GPUs."""
    rng = random.Random(seed)
    mix = []
    while (len(mix) < n) if gpus <= 0 else (sum(a * b for a, b, _ in mix) < gpus):
        u = rng.random()
        if u < 0.45:
            spec = (1, rng.choice([1, 1, 2]), "")
        elif u < 0.70:
            spec = (1, 4, "")
        elif u < 0.88:
            spec = (1, 8, "")
        elif u < 0.96:
            spec = (2, 8, "")
        else:
            spec = (4, 8, "")
        if rng.random() < 0.15:
            spec = (spec[0], spec[1], rng.choice(["a100", "h100"]))
        mix.append(spec)
    return mix


def snapshot():
    """Per node: GPUs in use, and its GPU model (from gres)."""
    info = json.loads(run(["sinfo", "--json"]))
    if "nodes" not in info:  # 23.11 on: grouped; the per-node list is scontrol's
        info = json.loads(run(["scontrol", "show", "nodes", "--json"]))
    nodes = info["nodes"]
    used, model = {}, {}
    for nd in nodes:
        g = nd.get("gres_used", "")
        head = g.split("(")[0]
        used[nd["name"]] = int(head.split(":")[-1]) if head else 0
        parts = nd.get("gres", "").split(":")
        model[nd["name"]] = parts[1] if len(parts) >= 3 else ""
    return used, model


def fgd_fragmented(mix, used, model, gpus_per_node):
    """FGD's fragmentation of the final state (Weng et al., ATC'23) for the
    mix's own typical tasks: a node's free GPUs count as fragmented for a
    task that cannot run there (too few free GPUs, or another model), each
    task weighted by its share of the mix's replicas. Whole GPUs only, as
    Slurm's gres are."""
    tasks = {}
    for n, g, con in mix:
        tasks[(g, con)] = tasks.get((g, con), 0) + n
    total = sum(tasks.values())
    frag = 0.0
    for name, u in used.items():
        free = gpus_per_node - u
        if free <= 0:
            continue
        for (g, con), count in tasks.items():
            runs = g <= free and (con == "" or con == model[name])
            frag += (0 if runs else free) * count / total
    return frag


def number(v):
    """A number, or 23.11 on's {"set", "infinite", "number"}."""
    return v.get("number", 0) if isinstance(v, dict) else v


def jobs():
    js = json.loads(run(["squeue", "--json"]))["jobs"]
    for j in js:  # 23.11 on: states as lists, numbers wrapped
        if isinstance(j.get("job_state"), list):
            j["job_state"] = j["job_state"][0] if j["job_state"] else ""
        for k in ("job_id", "start_time"):
            if k in j:
                j[k] = number(j[k])
    return js


def settle(max_s, poll=1.0, quiet_s=8.0, step=None):
    """Waits until the number of running jobs stops changing for quiet_s."""
    t0 = time.time()
    last, since = -1, time.time()
    while time.time() - t0 < max_s:
        if step:
            step()
        running = sum(1 for j in jobs() if j["job_state"] == "RUNNING")
        if running != last:
            last, since = running, time.time()
        elif time.time() - since >= quiet_s:
            break
        time.sleep(poll)
    return last


def measure(mix, ids, t_release, gpus_per_node, n_nodes):
    used, model = snapshot()
    js = {j["job_id"]: j for j in jobs()}
    placed = [i for i in ids if js.get(i, {}).get("job_state") == "RUNNING"]
    gpus = 0
    gangs = gangs_one_rack = 0
    last_start = t_release
    for k, i in enumerate(ids):
        j = js.get(i)
        if not j or j["job_state"] != "RUNNING":
            continue
        n, g, _ = mix[k]
        gpus += n * g
        last_start = max(last_start, j.get("start_time", t_release))
        if n > 1:
            gangs += 1
            names = expand(j.get("nodes", ""))
            racks = {(int(x[1:]) - 1) // RACK for x in names}
            gangs_one_rack += 1 if len(racks) == 1 else 0
    stranded = sum(gpus_per_node - u for u in used.values() if 0 < u < gpus_per_node)
    free_nodes = sum(1 for u in used.values() if u == 0)
    span = max(last_start - t_release, 1e-9)
    return {
        "jobs": len(ids), "jobs_placed": len(placed), "gpus_placed": gpus,
        "gpus_total": gpus_per_node * n_nodes,
        "gpus_free_on_partly_used_nodes": stranded, "free_nodes": free_nodes,
        "fgd_fragmented_gpus": fgd_fragmented(mix, used, model, gpus_per_node),
        "gangs_placed": gangs, "gangs_in_one_rack": gangs_one_rack,
        "seconds_to_last_start": last_start - t_release,
        "placements_per_second": len(placed) / span,
        "started": [k for k, i in enumerate(ids) if js.get(i, {}).get("job_state") == "RUNNING"],
        # Where each started job runs (its index in the mix: its nodes), to
        # trace why one side started a job the other did not.
        "nodes_of": {str(k): expand(js[i].get("nodes", "")) for k, i in enumerate(ids)
                     if js.get(i, {}).get("job_state") == "RUNNING"},
        "start_of": {str(k): js[i].get("start_time", 0) - t_release for k, i in enumerate(ids)
                     if js.get(i, {}).get("job_state") == "RUNNING"},
        "node_models": model,
    }


def expand(hosts):
    out = []
    depth, cur, parts = 0, "", []
    for c in hosts:
        depth += c == "["
        depth -= c == "]"
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    if cur:
        parts.append(cur)
    for p in parts:
        if "[" not in p:
            out.append(p)
            continue
        prefix, body = p.split("[", 1)
        for r in body.rstrip("]").split(","):
            a, _, b = r.partition("-")
            for k in range(int(a), int(b or a) + 1):
                out.append(prefix + str(k))
    return out


def one_run(mode, args, tmp):
    cdir = os.path.join(tmp, mode)
    run(["bash", CLUSTER, "up", "--nodes", str(args.nodes), "--gpus", "8", "--models", "a100,h100",
         "--racks", str(max(1, args.nodes // RACK)), "--dir", cdir, "--port", str(args.port)], timeout=120)
    os.environ["SLURM_CONF"] = os.path.join(cdir, "slurm.conf")
    try:
        mix = job_mix(args.jobs, args.seed, int(args.load * 8 * args.nodes))
        ids = []
        for n, g, c in mix:
            argv = ["sbatch", "--parsable", "-H", "--comment=placer", "-o", "/dev/null", "-N", str(n),
                    f"--gres=gpu:{g}", "--wrap=sleep 3600"]
            if c:
                argv.append(f"--constraint={c}")
            ids.append(int(run(argv).strip().split(";")[0]))
        cycles = []
        t_release = time.time()
        if mode == "slurm":
            run(["scontrol", "release", ",".join(str(i) for i in ids)])
            # Slurm's main scheduler stops at the first job that cannot
            # start; its backfill pass (bf_interval, 30 s) places the rest:
            # quiet for longer than one backfill interval.
            settle(args.max_seconds, quiet_s=45.0)
        else:
            def cycle():
                out = run([PLACER, "slurm-bridge", "--once", "--endpoint", args.endpoint, "--order", args.order] +
                          (["--no-stacking"] if args.no_stacking else []))
                for line in out.splitlines():
                    if line.startswith("cycle:"):
                        cycles.append(line)
            # Released jobs past Slurm's default_queue_depth (100) start in
            # its backfill pass too: as long a quiet as above.
            settle(args.max_seconds, poll=1.0, quiet_s=45.0, step=cycle)
        r = measure(mix, ids, t_release, 8, args.nodes)
        r["mode"] = mode
        if cycles:
            r["bridge_cycles"] = len(cycles)
            r["bridge_first_cycle"] = cycles[0]
        return r
    finally:
        run(["bash", CLUSTER, "down", "--dir", cdir], timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--load", type=float, default=0,
                    help="instead of --jobs: jobs until they ask for this share of the GPUs (e.g. 1.1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--order", default="fifo", help="the bridge's queue order (fifo, pack, strict)")
    ap.add_argument("--port", type=int, default=27000)
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5631")
    ap.add_argument("--max-seconds", type=float, default=240)
    ap.add_argument("--out", default="")
    ap.add_argument("--no-stacking", action="store_true", help="the bridge's --no-stacking (for comparison)")
    ap.add_argument("--capture", default="", help="the service keeps the bridge's rounds here (placer solve --request)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("side_by_side.py: needs root (slurmd runs the jobs as their users)")
    if not shutil.which("slurmctld") or not os.path.exists(PLACER):
        sys.exit("side_by_side.py: needs Slurm (scripts/install-deps.sh) and build/placer (make build)")
    serve = subprocess.Popen([PLACER, "serve", "--endpoint", args.endpoint] +
                             (["--capture", args.capture] if args.capture else []),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="placer-slurm-bench-")
    try:
        results = [one_run(m, args, tmp) for m in ("slurm", "placer")]
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    keys = ["jobs_placed", "gpus_placed", "gpus_total", "gpus_free_on_partly_used_nodes", "free_nodes",
            "fgd_fragmented_gpus",
            "gangs_placed", "gangs_in_one_rack", "seconds_to_last_start", "placements_per_second"]
    asked = sum(n * g for n, g, _ in job_mix(args.jobs, args.seed, int(args.load * 8 * args.nodes)))
    print(f"{results[0]['jobs']} jobs asking for {asked} GPUs ({100 * asked / (8 * args.nodes):.0f}%, seed {args.seed}) "
          f"on {args.nodes} nodes x 8 GPUs, racks of {RACK}; bridge order {args.order}")
    print(f"{'':34s} {'slurm alone':>12s} {'placer':>12s}")
    for k in keys:
        a, b = results[0][k], results[1][k]
        fmt = (lambda v: f"{v:12.1f}") if isinstance(a, float) or isinstance(b, float) else (lambda v: f"{v:12d}")
        print(f"{k:34s} {fmt(a)} {fmt(b)}")
    print("bridge:", results[1].get("bridge_cycles"), "cycles; first:", results[1].get("bridge_first_cycle", ""))
    doc = {"nodes": args.nodes, "jobs": results[0]["jobs"], "load": args.load, "order": args.order, "seed": args.seed,
           "date": time.strftime("%Y-%m-%d"),
           "runs": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
