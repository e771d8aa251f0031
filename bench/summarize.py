#!/usr/bin/env python3
"""Turns round_bench JSON files (one per scenario from a GPU session's steps, or one with all)
into one markdown summary (stdlib only): bench/summarize.py FILE.json [FILE.json ...]"""
import json
import sys

STAGES = ["validate", "flatten", "metrics_before", "score", "assign", "metrics_after"]


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    ctx = runs[0].get("context", {})
    print(f"# Round benchmark: {ctx.get('date', '?')}, commit {ctx.get('commit', '?')}\n")
    print(f"- host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz")
    print(f"- GPU: {ctx.get('gpu', 'none')}")
    print(f"- command: `bench/run.sh` (Google Benchmark, real time, mean over iterations)\n")
    print("| benchmark | backend | pending | placed | round ms | " + " | ".join(f"{s} ms" for s in STAGES) +
          " | calls | waits | MB up | MB down |")
    print("|---|---|---|---|---|" + "---|" * len(STAGES) + "---|---|---|---|")
    for b in (b for data in runs for b in data.get("benchmarks", [])):
        if b.get("error_occurred"):
            print(f"| {b['name'].split('/min_time')[0]} | skipped: {b.get('error_message', '')} |")
            continue
        name = b["name"].split("/min_time")[0]
        unit = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b.get("time_unit", "ms")]
        stages = " | ".join(f"{b.get(s + '_us', 0) / 1000:.3f}" for s in STAGES)
        print(f"| {name} | {b.get('label', '')} | {int(b.get('pending', 0))} | {int(b.get('placed', 0))} | "
              f"{b['real_time'] * unit:.2f} | {stages} | {int(b.get('calls', 0))} | {int(b.get('waits', 0))} | "
              f"{b.get('bytes_up', 0) / 1e6:.2f} | {b.get('bytes_down', 0) / 1e6:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench/summarize.py ROUND_BENCH.json [...]")
    main(sys.argv[1:])
