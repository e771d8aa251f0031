"""Working out a round's deltas against the last round the session accepted.

The same rules as placer::client::solve_incremental (service/src/client.cpp):
nodes are compared by index, jobs by name; a full snapshot goes when the node
count or topology changed or the epoch did not move, full job lists when a
name repeats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placer.wire.ClusterDelta import ClusterDeltaT
from placer.wire.JobDelta import JobDeltaT
from placer.wire.NodeUpdate import NodeUpdateT
from placer.wire.ScheduleRequest import ScheduleRequestT

from placer_client.objects import fingerprint, make


@dataclass(frozen=True)
class Snapshot:
    """A round as the session holds it once accepted: the cluster's epoch,
    topology and nodes by index, the pending and running jobs by name."""

    epoch: int
    topology: Any
    nodes: list[Any]
    pending: list[tuple[str, Any]]
    running: list[tuple[str, Any]]

    @classmethod
    def of(cls, round_: ScheduleRequestT) -> Snapshot:
        cluster = round_.cluster
        return cls(cluster.epoch, fingerprint(cluster.topology),
                   [fingerprint(n) for n in cluster.nodes or []],
                   [(j.name, fingerprint(j)) for j in round_.pending or []],
                   [(j.name, fingerprint(j)) for j in round_.running or []])


def _diff_jobs(old: list[tuple[str, Any]],
               new: list[tuple[str, Any]]) -> tuple[list[str], int] | None:
    """How `new` follows from `old` as a job delta: the names that leave, and
    how many jobs at the head of `new` stay (the rest arrive, appended).

    The jobs of `old` found unchanged and in order at the head of `new`
    stay; every other one leaves, coming back in the tail if `new` still
    holds its name. None when a name repeats in either list, which a delta
    keyed by name cannot express.
    """
    at = {name: i for i, (name, _) in enumerate(new)}
    if len(at) < len(new) or len({name for name, _ in old}) < len(old):
        return None
    left: list[str] = []
    kept = 0
    for name, job in old:
        if at.get(name) == kept and new[kept][1] == job:
            kept += 1
        else:
            left.append(name)
    return left, kept


def delta_request(old: Snapshot, new: Snapshot,
                  round_: ScheduleRequestT) -> ScheduleRequestT | None:
    """The request that moves the session from `old` to `round_` (`new` is
    its snapshot) by deltas, or None where only a full snapshot can: the
    epoch did not move, or the node count or the topology changed."""
    if (new.epoch <= old.epoch or len(new.nodes) != len(old.nodes)
            or new.topology != old.topology):
        return None
    nodes = round_.cluster.nodes
    changed = [make(NodeUpdateT, index=i, node=nodes[i])
               for i, (was, now) in enumerate(zip(old.nodes, new.nodes)) if was != now]
    cluster = make(ClusterDeltaT, baseEpoch=old.epoch, newEpoch=new.epoch, changed=changed)
    request = make(ScheduleRequestT, policy=round_.policy, now=round_.now,
                   deadlineUs=round_.deadlineUs)
    pending = _diff_jobs(old.pending, new.pending)
    running = _diff_jobs(old.running, new.running)
    if pending is None or running is None:
        request.delta, request.pending, request.running = cluster, round_.pending, round_.running
        return request
    (removed, pending_kept), (finished, running_kept) = pending, running
    request.jobDelta = make(JobDeltaT, baseEpoch=old.epoch, newEpoch=new.epoch,
                            removed=removed, added=(round_.pending or [])[pending_kept:],
                            finished=finished, started=(round_.running or [])[running_kept:])
    # The job delta carries the epochs itself: a cluster delta that changes
    # nothing is left off, as the C++ client does.
    if changed:
        request.delta = cluster
    return request
