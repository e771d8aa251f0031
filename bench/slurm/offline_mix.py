#!/usr/bin/env python3
"""The side-by-side's job mix without a live Slurm: Placer's round and a model of Slurm's.

    bench/slurm/offline_mix.py [--seeds 1-6] [--loads 1.0,1.15,1.3] [--placer build/placer ...]
                               [--trace SEED@LOAD] [--linear-only] [--timing N]

For each seed and load, the mix of bench/slurm/side_by_side.py (same job_mix)
on its cluster (64 nodes x 8 GPUs, a100 on n1-n32, h100 on n33-n64, racks of
16), every job held, the cluster empty:
  slurm   a model of Slurm 22.05 select/cons_tres as scripts/slurm-cluster.sh
          configures it (no topology plugin, equal node weights): every job in
          submission order; the nodes that can take it form runs of
          consecutive nodes; the first run that holds the job with the fewest
          CPUs free in all, else the biggest; in it, the nodes with the fewest
          CPUs free first (then by index). Checked against live runs: every
          job on the same nodes on seed 2 at 1.15 (121 jobs), the same
          started jobs on seeds 5 and 6, the same counts on seeds 1-6.
  placer  the bridge's first round as `placer solve` input (nodes with the
          bridge's labels and rack domains, jobs as it translates them: one
          CPU, 4 GiB, a node selector per partition and --constraint, gangs
          rack-preferred), solved by each --placer binary. With all jobs
          held and nothing finishing, the bridge's later cycles place nothing
          more: this is what it starts.
Prints per seed and load: jobs started / GPUs placed for each side, and the
first job left waiting (its index in submission order). --trace lists the
jobs one side started and the other did not. --linear-only runs each binary
with PLACER_LINEAR_ONLY set (its round is then its linear candidate, Slurm's
node choice as the solver models it) and counts, per seed and load, the jobs
that the candidate and the model put on different nodes (or that one starts
and the other not): 0 everywhere when the C++ model is the Python one. There
the model takes the bridge's rack-preferred gangs rack first (slurm(racks=True):
the tightest rack that holds the gang, Slurm's nodes inside it), as the
candidate honours a round's topology since 2026-11-29; the live Slurm of
scripts/slurm-cluster.sh has no topology plugin and spans racks.
--timing N solves every seed and load's round N times per binary, the
binaries alternating, and prints each binary's median round time (the
reply's `total` stage) and the median of its stages.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("side_by_side", os.path.join(HERE, "side_by_side.py"))
sbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sbs)

N, G, RACK, CPUS = 64, 8, 16, 64


def model_of(i):
    return ["a100", "h100"][i * 2 // N]


def mix_of(seed, load):
    return sbs.job_mix(400, seed, int(load * G * N))


def pick_nodes(nodes, ok, cpus, n):
    """Slurm's choice among `nodes` (ascending): the runs of consecutive
    nodes that can take the job; the first run that holds it with the fewest
    CPUs free in all, else the biggest; in it the nodes with the fewest CPUs
    free first (then by index); no run holds it: the first that can take one."""
    runs, cur, prev = [], [], None
    for i in nodes:
        if cur and (not ok[i] or i != prev + 1):
            runs.append(cur)
            cur = []
        if ok[i]:
            cur.append(i)
        prev = i
    if cur:
        runs.append(cur)
    best = None  # (holds the job, CPUs free in all, run)
    for r in runs:
        enough, total = len(r) >= n, sum(cpus[i] for i in r)
        if best is None or (enough and not best[0]) or (enough and total < best[1]) or \
           (not enough and not best[0] and total > best[1]):
            best = (enough, total, r)
    if best[0]:
        return sorted(best[2], key=lambda i: (cpus[i], i))[:n]
    return [i for i in nodes if ok[i]][:n]  # no one run holds it: Slurm gathers runs; rare here


def slurm(mix, racks=False):
    """(started job indices, {job: node indices}, GPUs placed) under the model.
    racks: a gang (which asks for a rack) goes into the rack that holds it
    with the fewest nodes to spare (then the first), as Slurm's tree topology
    picks a leaf switch and as the solver's linear candidate places it, and
    takes Slurm's nodes there; no rack holds it: the whole cluster."""
    free, cpus = [G] * N, [CPUS] * N
    started, where = [], {}
    for k, (n, g, c) in enumerate(mix):
        ok = [free[i] >= g and cpus[i] >= 1 and (not c or model_of(i) == c) for i in range(N)]
        if sum(ok) < n:
            continue
        nodes = list(range(N))
        if racks and n > 1:
            held = [(sum(ok[i] for i in range(r, r + RACK)), r) for r in range(0, N, RACK)]
            held = sorted(x for x in held if x[0] >= n)
            if held:
                nodes = list(range(held[0][1], held[0][1] + RACK))
        pick = pick_nodes(nodes, ok, cpus, n)
        for i in pick:
            free[i] -= g
            cpus[i] -= 1
        started.append(k)
        where[k] = pick
    return started, where, N * G - sum(free)


def round_files(mix, tmp):
    nodes = []
    for i in range(N):
        rack = i // RACK + 1
        nodes.append({"name": f"n{i + 1}", "gpu_model": model_of(i), "gpu_free_milli": [1000] * G,
                      "cpu_milli_capacity": CPUS * 1000, "cpu_milli_free": CPUS * 1000,
                      "memory_mib_capacity": 512000, "memory_mib_free": 512000, "domain": rack,
                      "labels": [f"slurm.feature/{model_of(i)}=true", f"slurm.feature/rack{rack}=true",
                                 "slurm.partition/train=true"]})
    domains = [{"name": "cluster", "level": 0, "parent": -1}] + \
              [{"name": f"rack{r}", "level": 1, "parent": 0} for r in range(1, N // RACK + 1)]
    cluster = {"epoch": 1, "topology": {"level_names": ["cluster", "rack"], "domains": domains}, "nodes": nodes}
    pending = []
    for k, (n, g, c) in enumerate(mix):
        j = {"name": f"j{k}", "replicas": n, "demand": {"gpus": g, "cpu_milli": 1000, "memory_mib": 4096},
             "submit_time": 1000 + k // 8,  # sbatch submits several a second; ties go by position
             "constraints": {"node_selector": ["slurm.partition/train=true"] + ([f"slurm.feature/{c}=true"] if c else [])}}
        if n > 1:
            j.update({"gang": True, "distinct_nodes": True, "topology_level": 1, "topology_mode": "Preferred"})
        pending.append(j)
    jobs = {"pending": pending, "policy": {"order": "Fifo", "stacking": True}, "now": 2000}
    cf, jf = os.path.join(tmp, "cluster.json"), os.path.join(tmp, "jobs.json")
    with open(cf, "w") as f:
        json.dump(cluster, f)
    with open(jf, "w") as f:
        json.dump(jobs, f)
    return cf, jf


def placer(mix, binary, tmp, linear_only=False):
    """(started job indices, {job: node indices}, GPUs placed) from `placer solve`."""
    cf, jf = round_files(mix, tmp)
    of = os.path.join(tmp, "reply.json")
    env = dict(os.environ)
    if linear_only:
        env["PLACER_LINEAR_ONLY"] = "1"
    subprocess.run([binary, "solve", "--cluster", cf, "--jobs", jf, "--backend", "cpu", "--output", of],
                   check=True, capture_output=True, env=env)
    with open(of) as f:
        body = json.load(f)["body"]
    global last_timing
    last_timing = {t["stage"]: t.get("micros", 0.0) for t in body.get("timing", [])}
    started, where, gpus = [], {}, 0
    for p in body.get("placements", []):
        k = p.get("job", 0)  # FlatBuffers JSON leaves out zeros
        reps = p.get("replicas", [])
        if not reps:
            continue
        started.append(k)
        where[k] = [r.get("node", 0) for r in reps]
        gpus += sum(len(r.get("gpus", [])) for r in reps)
    return sorted(started), where, gpus


last_timing = {}  # the stages of the last `placer solve` (micros)


def differ(where_a, where_b):
    """Jobs started by one side only, or on other nodes (as sets)."""
    return sorted(k for k in set(where_a) | set(where_b)
                  if sorted(where_a.get(k, [])) != sorted(where_b.get(k, [])))


def first_waiting(mix, started):
    return min(set(range(len(mix) + 1)) - set(started))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1-6", help="a range, e.g. 1-6")
    ap.add_argument("--loads", default="1.0,1.15,1.3")
    ap.add_argument("--placer", action="append", default=[], help="a placer binary (repeat to compare)")
    ap.add_argument("--trace", default="", help="SEED@LOAD: the jobs one side started and the other did not")
    ap.add_argument("--timing", type=int, default=0, help="N solves per round and binary: median round time")
    ap.add_argument("--linear-only", action="store_true",
                    help="each binary's linear candidate against the model, job by job (PLACER_LINEAR_ONLY)")
    a = ap.parse_args()
    bins = a.placer or [os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "placer")]
    tmp = tempfile.mkdtemp(prefix="placer-offline-mix-")
    if a.trace:
        seed, load = a.trace.split("@")
        mix = mix_of(int(seed), float(load))
        s, _, sg = slurm(mix)
        s_where = slurm(mix)[1]
        for b in bins:
            p, p_where, pg = placer(mix, b, tmp, a.linear_only)
            print(f"{b}: seed {seed} at {load}: slurm {len(s)} jobs / {sg} GPUs, placer {len(p)} / {pg}")
            d = differ(s_where, p_where)
            print(f"  on other nodes or one side only: {len(d)} of {len(set(s_where) | set(p_where))} jobs",
                  [(k, mix[k], s_where.get(k), p_where.get(k)) for k in d][:10])
            print("  slurm only: ", [(k, mix[k]) for k in sorted(set(s) - set(p))])
            print("  placer only:", [(k, mix[k]) for k in sorted(set(p) - set(s))])
            print("  first left waiting: slurm", first_waiting(mix, s), "placer", first_waiting(mix, p))
        return
    lo, _, hi = a.seeds.partition("-")
    if a.timing:
        import statistics
        stages = {b: {} for b in bins}
        for load in [float(x) for x in a.loads.split(",")]:
            for seed in range(int(lo), int(hi or lo) + 1):
                mix = mix_of(seed, load)
                for _ in range(a.timing):
                    for b in bins:
                        placer(mix, b, tmp)
                        for k, v in last_timing.items():
                            stages[b].setdefault(k, []).append(v)
        for b in bins:
            st = stages[b]
            print(f"{b}: {len(st['total'])} rounds, median total {statistics.median(st['total']) / 1000:.3f} ms; " +
                  ", ".join(f"{k} {statistics.median(v) / 1000:.3f} ms ({len(v)})" for k, v in st.items() if k != "total"))
        return
    if a.linear_only:
        print("| load | seed | jobs | Slurm (model): jobs / GPUs | " +
              " | ".join(f"{os.path.basename(b)} linear: jobs / GPUs, jobs placed otherwise" for b in bins) + " |")
        print("|---" * (4 + len(bins)) + "|")
        for load in [float(x) for x in a.loads.split(",")]:
            for seed in range(int(lo), int(hi or lo) + 1):
                mix = mix_of(seed, load)
                s, s_where, sg = slurm(mix, racks=True)
                cells = []
                for b in bins:
                    p, p_where, pg = placer(mix, b, tmp, True)
                    cells.append(f"{len(p)} / {pg}, {len(differ(s_where, p_where))}")
                print(f"| {load} | {seed} | {len(mix)} | {len(s)} / {sg} | " + " | ".join(cells) + " |", flush=True)
        return
    print("| load | seed | jobs (GPUs asked) | Slurm (model): jobs / GPUs | " +
          " | ".join(f"{os.path.basename(b)}: jobs / GPUs" for b in bins) + " | first left waiting: Slurm / " +
          " / ".join(os.path.basename(b) for b in bins) + " |")
    print("|---" * (5 + len(bins)) + "|")
    for load in [float(x) for x in a.loads.split(",")]:
        for seed in range(int(lo), int(hi or lo) + 1):
            mix = mix_of(seed, load)
            s, _, sg = slurm(mix)
            cells, waits = [], [str(first_waiting(mix, s))]
            for b in bins:
                p, _, pg = placer(mix, b, tmp)
                mark = "" if len(p) >= len(s) and pg >= sg else " *"
                cells.append(f"{len(p)} / {pg}{mark}")
                waits.append(str(first_waiting(mix, p)))
            asked = sum(n * g for n, g, _ in mix)
            print(f"| {load} | {seed} | {len(mix)} ({asked}) | {len(s)} / {sg} | " + " | ".join(cells) +
                  " | " + " / ".join(waits) + " |", flush=True)


if __name__ == "__main__":
    main()
