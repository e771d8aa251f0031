#!/usr/bin/env python3
"""The GPU calibration kit, on a machine with or without a GPU (ctest GpuKit.*):

    bench/gpu_kit/kit_test.py BUILD [--cuda] [unittest arguments]

- calibrate (--cuda: the build has the CUDA backend, so the kit must be there):
  without a GPU it exits 77 and says it skipped; with one it writes a record
  in which every part is measured or skipped with a reason.
- `round_bench timeline` on the device twin (the CUDA backend's host code over host
  memory): every round's recorded calls add up to what the round counted,
  a tier kernel carries its phase sum, and no call has GPU times.
- bench/gpu_model/fit.py takes the fixed costs from a kit's record, and
  names each assumed one without it.
- bench/gpu_kit/sass_lines.py counts a dump's instructions by source line and
  joins ncu's per-instruction samples to them, refusing a profile of other code.
"""
import importlib.util
import json
import lzma
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = None
CUDA = False


def load(path):
    """The Python file at `path` as a module."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_fit():
    return load(os.path.join(ROOT, "bench", "gpu_model", "fit.py"))


class Calibrate(unittest.TestCase):
    def test_skips_without_a_gpu_or_measures_with_one(self):
        exe = os.path.join(BUILD, "bench", "calibrate")
        if not CUDA:
            self.skipTest("no CUDA backend in this build: no kit")
        self.assertTrue(os.path.isfile(exe), f"{exe} was not built")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "kit.json")
            p = subprocess.run([exe, "--out", out, "--commit", "test", "--quick"], capture_output=True, text=True,
                               timeout=300)
            if p.returncode == 77:
                self.assertIn("no GPU here", p.stderr)
                self.assertIn("skipped", p.stderr)
                self.assertFalse(os.path.exists(out))
                return
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                kit = json.load(f)
            names = {m["name"] for m in kit["measurements"]} | {s["name"] for s in kit["skipped"]}
            for n in ("launch", "wait", "coop_launch_sync_33", "coop_launch_sync_132", "graph_h2d_kernel_d2h",
                      "d2h_4k", "d2h_64k", "d2h_512k", "grid_sync_8", "grid_sync_33", "grid_sync_132",
                      "cta_step_shared", "cta_step_global", "warp_min_shared", "warp_min_global", "warp_fold_min",
                      "cluster_sync_16", "dsm_step_2", "score_cell_thread",
                      "score_cell_warp"):
                self.assertIn(n, names)
            self.assertTrue(kit["score_cell_warp_matches_thread"])

    def test_refuses_bad_arguments(self):
        exe = os.path.join(BUILD, "bench", "calibrate")
        if not CUDA:
            self.skipTest("no CUDA backend in this build: no kit")
        p = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--out is required", p.stderr)


class RoundTimeline(unittest.TestCase):
    def test_twin_records_every_counted_call(self):
        exe = os.path.join(BUILD, "bench", "round_bench")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "timeline.json")
            p = subprocess.run([exe, "timeline", "--backend", "twin", "--scenario", "demo,1k", "--rounds", "3", "--commit", "t",
                                "--out", out], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                t = json.load(f)
        self.assertEqual(t["kit"], "placer-round-timeline")
        self.assertIn("twin", t["backend"])
        self.assertEqual(set(t["scenarios"]), {"demo", "1k"})
        for name, s in t["scenarios"].items():
            self.assertEqual(len(s["round"]), 3)
            self.assertIsNone(s["median"]["gpu_busy_us"])  # the twin: host times only
            self.assertGreater(s["median"]["tier_phase_sum_us"], 0, name)
            for r in s["round"]:
                self.assertEqual(r["unrecorded"], {"calls": 0, "waits": 0, "bytes_up": 0, "bytes_down": 0}, name)
                calls = r["calls"]
                kinds = {c["what"] for c in calls}
                self.assertTrue({"up", "down", "wait", "score", "tier_kernel"} <= kinds, (name, kinds))
                self.assertEqual(sum(c["calls"] for c in calls), sum(c["calls"] for c in calls if c["what"] != "wait"))
                # A wait is counted where the host waits, nowhere else.
                self.assertEqual(sum(c["waits"] for c in calls), sum(1 for c in calls if c["what"] == "wait"), name)
                self.assertEqual(sum(c["waits"] for c in calls if c["what"] != "wait"), 0, name)
                begin = [c["host_begin_us"] for c in calls]
                self.assertEqual(begin, sorted(begin), name)  # in the order they were made (one thread)
                self.assertGreaterEqual(begin[0], 0)
                self.assertLessEqual(begin[-1] + calls[-1]["host_us"], r["round_us"])
                for c in calls:
                    self.assertIsNone(c["gpu_us"])
                    self.assertGreaterEqual(c["host_us"], 0)
                    if c["what"] == "tier_kernel":
                        self.assertGreater(c["phase_sum_us"], 0)
                        self.assertEqual((c["calls"], c["waits"]), (1, 0))
                    if c["what"] == "down":
                        self.assertEqual(c["copies"], 1)
                        self.assertGreater(c["bytes_down"], 0)


KIT = {
    "kit": "placer-gpu-calibrate", "device": "NVIDIA H200", "date": "2026-12-02T00:00:00Z", "commit": "abc1234",
    "measurements": [
        {"name": "launch", "unit": "us", "median": 3.1},
        {"name": "wait", "unit": "us", "median": 7.2},
        {"name": "d2h_512k_gpu", "unit": "us", "median": 20.0},
        {"name": "h2d_512k_gpu", "unit": "us", "median": 40.0},
        {"name": "cta_step_global", "unit": "us", "median": 0.61},
        {"name": "grid_sync_8", "unit": "us", "median": 2.0},
        {"name": "grid_sync_33", "unit": "us", "median": 2.5},
        {"name": "grid_sync_132", "unit": "us", "median": 4.48},
    ],
    "skipped": [],
}


class FitTakesTheKit(unittest.TestCase):
    def test_costs_come_from_the_record(self):
        fit = load_fit()
        c = fit.fixed_costs(KIT, "kit.json", barriers=True)
        self.assertEqual(c["launch_us"][0], 3.1)
        self.assertEqual(c["wait_us"][0], 7.2)
        rate_down, rate_up = 512 * 1024 / 20.0 / 1e3, 512 * 1024 / 40.0 / 1e3
        self.assertAlmostEqual(c["copy_gbps"][0], (rate_down + rate_up) / 2)
        self.assertEqual(c["barrier_us"][0], 0.61)
        self.assertAlmostEqual(c["grid_sync_us"][0], 1.84, places=6)  # 2.0, 2.5, 4.48 at 8, 33, 132: a line
        self.assertAlmostEqual(c["grid_sync_per_cta_us"][0], 0.02, places=6)
        for name in ("launch_us", "wait_us", "copy_gbps", "barrier_us", "grid_sync_us"):
            self.assertTrue(c[name][1].startswith("measured"), (name, c[name][1]))
            self.assertIn("kit.json (NVIDIA H200, 2026-12-02T00:00:00Z, commit abc1234)", c[name][1])
        model = {"calls": 25, "waits": 13, "bytes": 1_000_000}
        self.assertAlmostEqual(fit.fixed_us(model, c), 3.1 * 25 + 7.2 * 13 + 1_000_000 / (c["copy_gbps"][0] * 1e3))

    def test_the_barrier_steps_are_fitted_beside_the_kits_primitives(self):
        # By default the kit gives the launch, the wait and the copies; the program's barrier steps cost
        # more than the bare primitives it times, so they are fitted, and the source names the primitive.
        fit = load_fit()
        c = fit.fixed_costs(KIT, "kit.json")
        self.assertEqual(c["launch_us"][0], 3.1)
        for name, primitive in (("barrier_us", "'cta_step_global' 0.61 us"), ("grid_sync_us", "'grid_sync_33' 2.5 us")):
            self.assertIsNone(c[name][0])
            self.assertTrue(c[name][1].startswith("fitted"), c[name][1])
            self.assertIn(primitive, c[name][1])
        self.assertIsNone(c["grid_sync_per_cta_us"][0])

    def test_without_a_record_each_cost_is_named_assumed_or_fitted(self):
        fit = load_fit()
        c = fit.fixed_costs(None)
        self.assertEqual((c["launch_us"][0], c["wait_us"][0], c["copy_gbps"][0]), (5.0, 10.0, 20.0))
        for name, (value, source) in c.items():
            self.assertTrue(source.startswith("assumed") if value is not None else source.startswith("fitted"),
                            (name, source))
        model = {"calls": 25, "waits": 13, "bytes": 1_000_000}
        self.assertAlmostEqual(fit.fixed_us(model, c), 5 * 25 + 10 * 13 + 1_000_000 / 20e3)

    def test_a_partial_record_keeps_the_rest_assumed(self):
        fit = load_fit()
        c = fit.fixed_costs({"measurements": [{"name": "launch", "median": 2.5}]}, "partial.json")
        self.assertEqual(c["launch_us"][0], 2.5)
        self.assertTrue(c["wait_us"][1].startswith("assumed"))
        self.assertIsNone(c["grid_sync_us"][0])


def load_sass_lines():
    return load(os.path.join(HERE, "sass_lines.py"))


# Two source lines of a kernel as `nvdisasm -c -g` prints them (another kernel's section after it).
DUMP = """\
.text._Z6kernelv:
	//## File "/src/kernels/portable/tier/bid.hpp", line 14
        /*0000*/                   LDL.64 R50, [R67+0x178] ;
        /*0010*/                   LDL R56, [R67] ;
        /*0020*/                   LD.E R51, desc[UR32][R50.64] ;
	//## File "/src/kernels/portable/tier/offer_group.hpp", line 99
        /*0030*/                   LDL R7, [R1+0x156c]                      (*"SpillRefill"*);
        /*0040*/                   STL [R1+0x15a8], R18                     (*"SpillRefill"*);
        /*0050*/               @P0 BRA `(.L_x_1) ;
        /*0060*/                   SHFL.DOWN PT, R3, R2, 0x1, 0x1f ;
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.text._Z5otherv:
	//## File "/src/other.cu", line 1
        /*0000*/                   LDL R1, [R1] ;
"""
# ncu's source page of the same code (absolute addresses), after a line of its own.
STALLS = """\
==PROF== Disconnected from process 1
"#","Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"1","7f0000000100","LDL.64 R50, [R67+0x178]","30","28"
"2","7f0000000110","LDL R56, [R67]","10","9"
"3","7f0000000120","LD.E R51, desc[UR32][R50.64]","40","40"
"4","7f0000000130","LDL R7, [R1+0x156c]","5","5"
"5","7f0000000140","STL [R1+0x15a8], R18","1","0"
"6","7f0000000150","@P0 BRA `(.L_x_1)","2","1"
"7","7f0000000160","SHFL.DOWN PT, R3, R2, 0x1, 0x1f","2","2"
"8","7f0000000170","BAR.SYNC.DEFER_BLOCKING 0x0","10","10"
"""


class SassLines(unittest.TestCase):
    def test_counts_a_dumps_instructions_by_line(self):
        sl = load_sass_lines()
        insns = sl.read_dump(DUMP.splitlines(), "kernel")
        self.assertEqual(len(insns), 8)  # the other kernel's left out
        by = sl.static_counts(insns)
        bid, offers = by[("bid.hpp", 14)], by[("offer_group.hpp", 99)]
        self.assertEqual((bid["all"], bid["LDL"], bid["LD"], bid["spill LDL"]), (3, 2, 1, 0))
        self.assertEqual((offers["LDL"], offers["spill LDL"], offers["STL"], offers["spill STL"]), (1, 1, 1, 1))
        self.assertEqual((offers["SHFL"], offers["BAR"], offers["all"]), (1, 1, 5))

    def test_joins_the_samples_of_the_same_code(self):
        sl = load_sass_lines()
        insns = sl.read_dump(DUMP.splitlines(), "kernel")
        body, numeric = sl.read_stalls(STALLS)
        self.assertEqual(numeric, ["Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)"])
        by, agreement = sl.join_stalls(insns, body, numeric)
        self.assertEqual(agreement, 1.0)
        self.assertEqual(by[("bid.hpp", 14)]["Warp Stall Sampling (All Samples)"], 80)
        self.assertEqual(by[("offer_group.hpp", 99)]["Warp Stall Sampling (Not-issued Samples)"], 18)
        with tempfile.TemporaryDirectory() as d:
            dump, stalls, out = (os.path.join(d, n) for n in ("k.sass", "k.csv.xz", "k.json"))
            with open(dump, "w") as f:
                f.write(DUMP)
            with lzma.open(stalls, "wt") as f:  # as the kit's step brings it back
                f.write(STALLS)
            p = subprocess.run([sys.executable, os.path.join(HERE, "sass_lines.py"), dump, "--function", "kernel",
                                "--stalls", stalls, "--json", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                report = json.load(f)
            self.assertEqual(report["files"]["bid.hpp"]["Warp Stall Sampling (All Samples)"], 80)
            self.assertAlmostEqual(report["total"], 100)
        # A page without addresses (and a line before its header) joins by the instructions' order.
        plain = "\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != 1)
                          for line in STALLS.splitlines()[1:])
        by, agreement = sl.join_stalls(insns, *sl.read_stalls('"tier_grid_kernel"\n' + plain))
        self.assertEqual(agreement, 1.0)
        self.assertEqual(by[("offer_group.hpp", 99)]["Warp Stall Sampling (All Samples)"], 20)

    def test_refuses_a_profile_of_other_code(self):
        sl = load_sass_lines()
        insns = sl.read_dump(DUMP.splitlines(), "kernel")
        shifted = STALLS.replace("7f0000000100", "7f00000000f0")  # every row one instruction off
        by, agreement = sl.join_stalls(insns, *sl.read_stalls(shifted))
        self.assertLess(agreement, 0.9)
        with tempfile.TemporaryDirectory() as d:
            dump, stalls = os.path.join(d, "k.sass"), os.path.join(d, "k.csv")
            with open(dump, "w") as f:
                f.write(DUMP)
            with open(stalls, "w") as f:
                f.write(shifted)
            p = subprocess.run([sys.executable, os.path.join(HERE, "sass_lines.py"), dump, "--function", "kernel",
                                "--stalls", stalls], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn("not the same code", p.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    BUILD = os.path.abspath(args.pop(0))
    if args and args[0] == "--cuda":
        CUDA = True
        args.pop(0)
    unittest.main(argv=[sys.argv[0], *args], verbosity=2)
