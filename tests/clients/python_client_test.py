#!/usr/bin/env python3
"""The Python client (clients/python) against a real `placer serve`.

ctest runs it (tests/CMakeLists.txt); by hand, from the repository root:

    PYTHONPATH=build/clients/python/wire:clients/python /usr/bin/python3 \\
        tests/clients/python_client_test.py --placer build/placer --flatc flatc

Exits 77 (ctest: skipped) when python3-zmq or python3-flatbuffers is missing.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import flatbuffers  # noqa: F401
    import zmq  # noqa: F401
except ImportError as missing:
    print(f"SKIPPED: the Python client needs python3-zmq and python3-flatbuffers ({missing}); "
          "scripts/install-deps.sh installs them", file=sys.stderr)
    sys.exit(77)

from placer.wire.Body import Body
from placer.wire.Cluster import Cluster, ClusterT
from placer.wire.Demand import DemandT
from placer.wire.Envelope import Envelope, EnvelopeT
from placer.wire.ErrorCode import ErrorCode
from placer.wire.Header import HeaderT
from placer.wire.Job import JobT
from placer.wire.JobBatch import JobBatch, JobBatchT
from placer.wire.Node import NodeT
from placer.wire.ReplicaPlacement import ReplicaPlacementT
from placer.wire.RunningJob import RunningJobT
from placer.wire.ScheduleReply import ScheduleReplyT
from placer.wire.ScheduleRequest import ScheduleRequestT

from placer.wire.NodeConstraints import NodeConstraintsT
from placer_client import Client, ClientError, Reply, make, plain
from placer_client.client import _SharingBuilder

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schemas" / "placement.fbs"
EXAMPLES = ROOT / "data" / "examples"
ARGS = argparse.Namespace()  # --placer, --flatc: set in __main__


class Server:
    """`placer serve` on a loopback port: an ephemeral one at first, the
    same one again after a restart."""

    def __init__(self, endpoint: str = "tcp://127.0.0.1:*", extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self._log = tempfile.NamedTemporaryFile(prefix="placer-serve-", suffix=".log")
        self._process = subprocess.Popen(
            [ARGS.placer, "serve", "--endpoint", endpoint, "--backend", "cpu", "--quiet", *(extra or [])],
            stdout=subprocess.DEVNULL, stderr=self._log, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 10
        while (serving := re.search(r"serving on (\S+)", self.log())) is None:
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"placer serve did not start:\n{self.log()}")
            time.sleep(0.02)
        self.endpoint = serving.group(1)

    def log(self) -> str:
        return Path(self._log.name).read_text()

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)
        self._log.close()

    def kill(self) -> None:
        """SIGKILL: a replica that dies with no word to its clients."""
        self._process.kill()
        self._process.wait(timeout=10)
        self._log.close()

    def restart(self) -> Server:
        """A new process on the same endpoint: the sessions are gone."""
        self.stop()
        return Server(self.endpoint)

    def pause(self) -> None:
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)


def load(path: Path, reader: type, cls: type) -> Any:
    """A FlatBuffers JSON file (comments, enum names and all) as object-API
    values, through flatc and its binary form."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([ARGS.flatc, "-b", "--root-type", f"placer.wire.{reader.__name__}",
                        "-o", out, SCHEMA, path], check=True)
        data = (Path(out) / f"{path.stem}.plcr").read_bytes()
    return plain(cls.InitFromObj(reader.GetRootAs(data, 0)))


def example_round() -> ScheduleRequestT:
    """data/examples: the round `placer solve` reads in the README."""
    batch = load(EXAMPLES / "jobs.json", JobBatch, JobBatchT)
    return make(ScheduleRequestT, cluster=load(EXAMPLES / "cluster.json", Cluster, ClusterT),
                pending=batch.pending, running=batch.running, policy=batch.policy, now=batch.now)


def job(name: str, gpus: int, **fields: Any) -> JobT:
    demand = make(DemandT, gpus=gpus, cpuMilli=4000, memoryMib=16384)
    return make(JobT, name=name, demand=demand, **fields)


def running(name: str, node: int, gpus: list[int], milli: int, cpu: int,
            memory: int) -> RunningJobT:
    demand = make(DemandT, gpus=len(gpus), gpuMilli=milli, cpuMilli=cpu, memoryMib=memory)
    return make(RunningJobT, name=name, demand=demand,
                replicas=[make(ReplicaPlacementT, node=node, gpus=gpus, gpuMilli=milli)])


def sequence() -> Iterator[tuple[str, ScheduleRequestT, bool]]:
    """One round changed in place step by step, as a control plane keeps its
    state: (what changed, the round, whether it can go out as deltas)."""
    round_ = example_round()
    nodes, pending = round_.cluster.nodes, round_.pending
    # What a100-1 has in use (cluster.json leaves it unexplained) is two running jobs'.
    round_.running = [running("old-train", 1, [0], 1000, 16000, 131072),
                      running("old-serve", 1, [1], 500, 8000, 65536)]
    yield "the first round", round_, False

    round_.cluster.epoch = 2
    nodes[3].cpuMilliFree -= 16000  # taken by something Placer does not schedule
    pending[:] = [j for j in pending if j.name != "etl"]
    pending.append(job("eval", 1))
    yield "a node changes, a job leaves, one arrives", round_, True

    round_.cluster.epoch = 3
    pending.append(pending.pop(1))  # ranker-serve, to the back
    round_.running.pop()
    nodes[1].gpuFreeMilli[1] += 500
    nodes[1].cpuMilliFree += 8000
    nodes[1].memoryMibFree += 65536
    yield "a job moves to the back of the queue, a running one finishes", round_, True

    round_.cluster.epoch = 4
    nodes[2].gpuHealthy = None  # repaired
    next(j for j in pending if j.name == "eval").replicas = 3
    round_.running.append(running("sidecar", 0, [], 1000, 4000, 1024))
    nodes[0].cpuMilliFree -= 4000
    nodes[0].memoryMibFree -= 1024
    yield "a GPU repaired, a job grows in place, a running job starts", round_, True

    round_.cluster.epoch = 5
    pending.append(job("eval-2", 2))
    yield "a job arrives", round_, True

    round_.cluster.epoch = 6
    pending.pop()
    nodes.pop()
    yield "a node fewer: a full snapshot", round_, False

    round_.cluster.epoch = 7
    nodes[0].gpuFreeMilli[3] = 0
    nodes[0].gpuFreeMilli[2] = 300
    yield "back to deltas", round_, True


def placed(result: ScheduleReplyT) -> list[tuple[str, list[tuple[int, list[int], int]]]]:
    return [(p.name, [(r.node, r.gpus, r.gpuMilli) for r in p.replicas])
            for p in result.placements]


def unplaced(result: ScheduleReplyT) -> list[tuple[str, int]]:
    return [(u.name, u.reason) for u in result.unplaced]


def stages(reply: Reply) -> set[str]:
    return {t.stage for t in reply.result.timing}


class PythonClientTest(unittest.TestCase):
    server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def client(self, session: str, timeout_ms: int = 5000) -> Client:
        client = Client(self.server.endpoint, timeout_ms=timeout_ms, session=session)
        self.addCleanup(client.close)
        return client

    def test_reply_is_what_placer_solve_gives(self) -> None:
        reply = self.client("equal-to-solve").solve(example_round())
        self.assertTrue(reply.ok, reply.message)
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([ARGS.placer, "solve", "--cluster", EXAMPLES / "cluster.json",
                            "--jobs", EXAMPLES / "jobs.json", "--backend", "cpu",
                            "--output", f"{out}/reply.json"], check=True, capture_output=True)
            expected = load(Path(out) / "reply.json", Envelope, EnvelopeT).body
        self.assertEqual(len(placed(reply.result)), 4, "every example job is placed")
        self.assertEqual(placed(reply.result), placed(expected))
        self.assertEqual(unplaced(reply.result), unplaced(expected))
        self.assertEqual(reply.result.epoch, expected.epoch)
        for metric in ("jobsPlaced", "replicasPlaced", "gpuMilliPlaced"):
            self.assertEqual(getattr(reply.result.metrics, metric),
                             getattr(expected.metrics, metric), metric)

    def check_sequence(self, restart_before: int | None = None) -> None:
        """Every round of sequence() sent incrementally in one session gives
        the placements a second session gets with full snapshots; with a
        service restart before round `restart_before`, after one resync."""
        incremental = self.client(f"incremental-{restart_before}")
        full = self.client(f"full-{restart_before}")
        for k, (what, round_, as_deltas) in enumerate(sequence()):
            with self.subTest(round=k, what=what):
                if k == restart_before:
                    type(self).server = self.server.restart()
                got = incremental.solve_incremental(round_)
                want = full.solve(round_)
                self.assertTrue(got.ok, got.message)
                self.assertTrue(want.ok, want.message)
                self.assertEqual(got.result.epoch, round_.cluster.epoch)
                self.assertTrue(placed(want.result), "a round with nothing placed proves little")
                self.assertEqual(placed(got.result), placed(want.result))
                self.assertEqual(unplaced(got.result), unplaced(want.result))
                self.assertNotIn("apply_delta", stages(want))
                if restart_before is None:
                    self.assertEqual("apply_delta" in stages(got), as_deltas)
                    self.assertEqual(incremental.resyncs, 0)
                else:
                    self.assertEqual(incremental.resyncs, 0 if k < restart_before else 1)

    def test_incremental_rounds_place_as_full_snapshots_do(self) -> None:
        self.check_sequence()

    def test_restart_costs_one_resync_and_no_round(self) -> None:
        self.check_sequence(restart_before=3)

    def test_negative_cpu_is_invalid_argument_naming_the_job(self) -> None:
        client = self.client("bad-request")
        round_ = example_round()
        self.assertTrue(client.solve_incremental(round_).ok)
        round_.cluster.epoch = 2
        round_.pending.append(
            make(JobT, name="bad-cpu", demand=make(DemandT, cpuMilli=-1, memoryMib=1024)))
        reply = client.solve_incremental(round_)
        self.assertEqual(reply.code, ErrorCode.InvalidArgument)
        self.assertIn("bad-cpu", reply.message)
        self.assertIn("cpu_milli", reply.message)
        # The session stayed at the last round it accepted: the next goes
        # out as deltas against that, without a resync.
        round_.pending.pop()
        round_.cluster.epoch = 3
        reply = client.solve_incremental(round_)
        self.assertTrue(reply.ok, reply.message)
        self.assertIn("apply_delta", stages(reply))
        self.assertEqual(client.resyncs, 0)

    def test_a_repeated_job_name_is_refused_and_the_session_kept(self) -> None:
        client = self.client("repeated-name")
        round_ = example_round()
        self.assertTrue(client.solve_incremental(round_).ok)
        round_.cluster.epoch = 2
        round_.pending.append(job("etl", 1))
        reply = client.solve_incremental(round_)
        self.assertEqual(reply.code, ErrorCode.InvalidArgument)
        self.assertIn("two pending jobs are named 'etl'", reply.message)
        round_.pending.pop()
        round_.cluster.epoch = 3
        reply = client.solve_incremental(round_)
        self.assertTrue(reply.ok, reply.message)
        self.assertEqual(client.resyncs, 0)

    def test_silent_service_times_out_and_the_next_call_gets_through(self) -> None:
        client = self.client("timeout", timeout_ms=300)
        self.server.pause()
        try:
            silence = f"no reply from {re.escape(self.server.endpoint)} within 300 ms"
            with self.assertRaisesRegex(ClientError, silence):
                client.solve(example_round())
        finally:
            self.server.resume()
        reply = client.solve(example_round())
        self.assertTrue(reply.ok, reply.message)

    def test_a_round_lost_in_flight_is_sent_again(self) -> None:
        client = Client(self.server.endpoint, timeout_ms=300, session="retry", retries=2)
        self.addCleanup(client.close)
        round_ = example_round()
        self.assertTrue(client.solve_incremental(round_).ok)
        round_.cluster.epoch = 2
        round_.pending.append(job("late", 1))
        self.server.pause()  # the round goes in, no answer comes out
        resume = threading.Timer(0.45, self.server.resume)
        resume.start()
        try:
            reply = client.solve_incremental(round_)
        finally:
            resume.join()
        self.assertTrue(reply.ok, reply.message)
        self.assertGreaterEqual(client.retried, 1)
        # The resent delta came on a new connection, with the session's
        # secret, so it reaches the same session: solved as it is when the
        # lost one was dropped with its connection, or answered StaleEpoch
        # and resynced once when the lost one was solved first.
        self.assertIsNotNone(client.session_secret)
        self.assertLessEqual(client.resyncs, 1)
        self.assertIn("late", [p.name for p in reply.result.placements])

    def test_a_round_fails_over_to_the_next_replica_as_a_snapshot(self) -> None:
        a, b = Server(), Server()
        self.addCleanup(b.stop)
        client = Client(f"{a.endpoint}, {b.endpoint}", timeout_ms=2000, session="failover")
        self.addCleanup(client.close)
        self.assertEqual(client.endpoints, [a.endpoint, b.endpoint])
        steps = sequence()  # one round, changed in place step by step
        self.assertTrue(client.solve_incremental(next(steps)[1]).ok)
        reply = client.solve_incremental(next(steps)[1])
        self.assertTrue(reply.ok, reply.message)
        a.kill()
        round_ = next(steps)[1]
        started = time.monotonic()
        reply = client.solve_incremental(round_)
        took = time.monotonic() - started
        self.assertTrue(reply.ok, reply.message)
        self.assertLess(took, 1.0, "the dropped connection is seen, not waited out for 2 s")
        self.assertEqual(client.endpoint, b.endpoint)
        self.assertEqual((client.failovers, client.resyncs), (1, 1))
        self.assertNotIn("apply_delta", stages(reply), "b did not hold the session: a full snapshot")
        with Client(b.endpoint, session="fresh") as fresh:
            want = fresh.solve(round_)
        self.assertEqual(placed(reply.result), placed(want.result))
        self.assertEqual(reply.result.epoch, round_.cluster.epoch)
        for _ in range(2):
            reply = client.solve_incremental(next(steps)[1])
            self.assertTrue(reply.ok, reply.message)
        self.assertEqual(client.failovers, 1)
        self.assertIn("apply_delta", stages(reply), "the deltas after it go to b")
        with self.assertRaisesRegex(ClientError, "empty entry"):
            Client(f"{b.endpoint},,{b.endpoint}")

    def test_curve_service_answers_listed_keys_only(self) -> None:
        with tempfile.TemporaryDirectory() as keys:
            for name in ("server", "alice", "mallory"):
                subprocess.run([ARGS.placer, "keygen", "--out", keys, "--name", name],
                               check=True, capture_output=True)
            allowed = Path(keys) / "allowed"
            allowed.mkdir()
            shutil.copy(Path(keys) / "alice.key", allowed)
            server = Server(extra=["--curve-secret", f"{keys}/server.key_secret",
                                   "--allow-keys", str(allowed)])
            try:
                with Client(server.endpoint, session="curve", server_key=f"{keys}/server.key",
                            client_cert=f"{keys}/alice.key_secret") as alice:
                    self.assertTrue(alice.solve(example_round()).ok)
                with Client(server.endpoint, timeout_ms=300, server_key=f"{keys}/server.key",
                            client_cert=f"{keys}/mallory.key_secret") as mallory:
                    with self.assertRaisesRegex(ClientError, "never answers"):
                        mallory.solve(example_round())
                with Client(server.endpoint, timeout_ms=300) as plain_client:
                    with self.assertRaises(ClientError):
                        plain_client.solve(example_round())
                self.assertIn("CURVE handshake refused", server.log())
            finally:
                server.stop()

    def test_health_counts_the_rounds_and_a_silent_service_raises(self) -> None:
        client = self.client("health", timeout_ms=300)
        before = client.health()
        self.assertGreaterEqual(before.workers, 1)
        self.assertIn("cpu", before.backend)
        self.assertGreater(before.uptimeS, 0)
        self.assertTrue(client.solve(example_round()).ok)
        after = client.health()
        self.assertEqual(after.requests, before.requests + 1)  # probes are not counted
        self.assertEqual(after.roundsOk, before.roundsOk + 1)
        self.assertEqual(after.errors, before.errors)
        self.assertTrue(after.ready, after.notReady)
        self.assertEqual(len(after.workerStates), after.workers)
        self.assertEqual(sum(w.rounds for w in after.workerStates), after.roundsOk + after.errors)
        self.assertFalse(any(w.busy for w in after.workerStates))
        probe = [ARGS.placer, "health", "--endpoint", self.server.endpoint, "--timeout-ms", "300"]
        ready = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        self.assertEqual(ready.returncode, 0, ready.stderr)
        self.assertTrue(ready.stdout.startswith("ready"), ready.stdout)
        self.assertIn("worker 0: idle", ready.stdout)
        self.server.pause()
        try:
            with self.assertRaisesRegex(ClientError, "no reply from .* within 300 ms"):
                client.health()
            for kind in ("--ready", "--live"):
                silent = subprocess.run([*probe, kind], capture_output=True, text=True, timeout=30)
                self.assertEqual(silent.returncode, 3, silent.stdout + silent.stderr)
        finally:
            self.server.resume()
        self.assertGreaterEqual(client.health().uptimeS, after.uptimeS)

    def test_serve_options_from_flags_environment_and_config_file(self) -> None:
        bad = subprocess.run([ARGS.placer, "serve", "--workers", "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--workers: Value 0 not in range 1 to 256", bad.stderr)
        typo = subprocess.run([ARGS.placer, "serve", "--max-round-ms", "5s"], capture_output=True, text=True,
                              timeout=30)
        self.assertEqual(typo.returncode, 2)
        self.assertIn("--max-round-ms", typo.stderr)
        helped = subprocess.run([ARGS.placer, "serve", "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(helped.returncode, 0)
        self.assertIn("PLACER_MAX_NODES", helped.stdout)
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as config:
            config.write("workers = 3\n")
            config.flush()
            # The environment sets what the file does not; the command line wins over both.
            for extra, env, workers in (([], {"PLACER_WORKERS": "2"}, 2),
                                        (["--config", config.name], {}, 3),
                                        (["--config", config.name, "--workers", "4"], {"PLACER_WORKERS": "2"}, 4)):
                server = Server(extra=extra, env=env)
                try:
                    with Client(server.endpoint, timeout_ms=3000) as client:
                        self.assertEqual(client.health().workers, workers, (extra, env))
                finally:
                    server.stop()

    def test_example_runs(self) -> None:
        example = ROOT / "clients" / "python" / "example.py"
        out = subprocess.run([sys.executable, example, "--endpoint", self.server.endpoint],
                             check=True, capture_output=True, text=True).stdout
        self.assertIn("round 1 (epoch 1, sent as a full snapshot): 3 placed, 0 unplaced", out)
        self.assertIn("round 2 (epoch 2, sent as deltas): 1 placed, 0 unplaced", out)

    def test_placer_client_raw_matches_the_request_id_it_sent(self) -> None:
        header = make(HeaderT, requestId=42, session="raw")
        envelope = make(EnvelopeT, header=header, bodyType=Body.ScheduleRequest, body=example_round())
        builder = flatbuffers.Builder(1 << 16)
        builder.Finish(envelope.Pack(builder), file_identifier=b"PLCR")
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            f.write(builder.Output())
            f.flush()
            done = subprocess.run([ARGS.placer, "client", "--raw", f.name, "--endpoint", self.server.endpoint,
                                   "--timeout-ms", "3000"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout, r"\"request_id\": 42\b")

    def test_repeated_labels_go_once_and_still_decide(self) -> None:
        # Feature labels on every node, the same texts: each is in the
        # request once (the client's builder shares strings), and a node
        # selector on one of the repeated labels still picks its nodes.
        round_ = example_round()
        features = [f"feature.node.kubernetes.io/cpu-cpuid.F{k}=true" for k in range(12)]
        for i, node in enumerate(round_.cluster.nodes):
            node.labels = [f"kubernetes.io/hostname={node.name}", f"zone={'ab'[i % 2]}", *features]
        picky = job("zone-b", 1, constraints=make(NodeConstraintsT, nodeSelector=["zone=b"]))
        round_.pending = [picky]
        envelope = make(EnvelopeT, header=make(HeaderT, requestId=1), bodyType=Body.ScheduleRequest, body=round_)
        builder = _SharingBuilder(1 << 16)
        builder.Finish(envelope.Pack(builder), file_identifier=b"PLCR")
        sent = bytes(builder.Output())
        for text in (*features, "zone=b"):
            self.assertEqual(sent.count(text.encode()), 1, text)
        unshared = flatbuffers.Builder(1 << 16)
        unshared.Finish(envelope.Pack(unshared), file_identifier=b"PLCR")
        client = self.client("repeated-labels")
        reply = client.solve(round_)
        self.assertTrue(reply.ok, reply.message)
        # What the client sent is the shared form (its header, with the session, differs a little).
        self.assertLess(abs(client.last_request_bytes - len(sent)), 256)
        self.assertLess(client.last_request_bytes, len(unshared.Output()) - 3 * len(features) * 40)
        got = placed(reply.result)
        self.assertEqual([name for name, _ in got], ["zone-b"])
        self.assertTrue(all(node % 2 == 1 for node, _, _ in got[0][1]), got)  # the zone=b nodes

    def test_make_refuses_a_misspelt_field(self) -> None:
        with self.assertRaisesRegex(TypeError, "NodeT has no field 'gpuFreeMili'"):
            make(NodeT, name="n", gpuFreeMili=[1000])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--placer", required=True, help="the placer binary")
    parser.add_argument("--flatc", default="flatc")
    _, rest = parser.parse_known_args(namespace=ARGS)
    unittest.main(argv=[sys.argv[0], *rest])
