#!/usr/bin/env python3
"""A small cluster and a few jobs through placer_client: a full snapshot,
then, after the control plane starts what was placed, a round that goes out
as deltas. Run against a service (clients/python/README.md):

    build/placer serve &
    PYTHONPATH=build/clients/python/wire python3 clients/python/example.py
"""
from __future__ import annotations

import argparse
import sys

from placer.wire.Cluster import ClusterT
from placer.wire.Demand import DemandT
from placer.wire.ErrorCode import ErrorCode
from placer.wire.Job import JobT
from placer.wire.JobKind import JobKind
from placer.wire.Node import NodeT
from placer.wire.Pool import Pool
from placer.wire.RunningJob import RunningJobT
from placer.wire.ScheduleRequest import ScheduleRequestT
from placer.wire.Topology import TopologyT
from placer.wire.TopologyDomain import TopologyDomainT
from placer.wire.TopologyMode import TopologyMode
from placer.wire.UnplacedReason import UnplacedReason

from placer_client import Client, Reply, enum_name, make

LEAF = 2  # the leaf switches' level in the topology
LEAF_0, LEAF_1 = 2, 3  # their domains' indices


def node(name: str, model: str, gpus: int, pool: int, leaf: int) -> NodeT:
    return make(NodeT, name=name, gpuModel=model, gpuFreeMilli=[1000] * gpus,
                gpuNvlink=[i * 2 // gpus for i in range(gpus)],  # two NVLink islands
                cpuMilliCapacity=96000, cpuMilliFree=96000,
                memoryMibCapacity=1 << 20, memoryMibFree=1 << 20, pool=pool, domain=leaf)


def first_round() -> ScheduleRequestT:
    """Two leaf switches under one spine: two 8-GPU training nodes under one,
    two 4-GPU shared nodes under the other; a gang that must stay under one
    leaf, a fractional inference service and a CPU-only batch job."""
    topology = make(TopologyT, levelNames=["cluster", "spine", "leaf"], domains=[
        make(TopologyDomainT, name="cluster", level=0, parent=-1),
        make(TopologyDomainT, name="spine-0", level=1, parent=0),
        make(TopologyDomainT, name="leaf-0", level=LEAF, parent=1),
        make(TopologyDomainT, name="leaf-1", level=LEAF, parent=1)])
    nodes = [node("a100-0", "A100", 8, Pool.Training, LEAF_0),
             node("a100-1", "A100", 8, Pool.Training, LEAF_0),
             node("l40s-0", "L40S", 4, Pool.Shared, LEAF_1),
             node("l40s-1", "L40S", 4, Pool.Shared, LEAF_1)]
    jobs = [
        make(JobT, name="llm-pretrain", kind=JobKind.Training, priority=2, replicas=2, gang=True,
             allowedGpuModels=["A100"], networkSensitivity=0.9,
             topologyLevel=LEAF, topologyMode=TopologyMode.Required,
             demand=make(DemandT, gpus=4, cpuMilli=32000, memoryMib=262144)),
        make(JobT, name="chat-serve", kind=JobKind.Inference, priority=1, replicas=3,
             demand=make(DemandT, gpus=1, gpuMilli=250, cpuMilli=4000, memoryMib=16384)),
        make(JobT, name="etl", kind=JobKind.Batch,
             demand=make(DemandT, gpus=0, cpuMilli=16000, memoryMib=65536)),
    ]
    return make(ScheduleRequestT, cluster=make(ClusterT, epoch=1, nodes=nodes, topology=topology),
                pending=jobs, running=[], now=1000)


def start_placed(round_: ScheduleRequestT, reply: Reply) -> None:
    """What a control plane does with the placements: the jobs start, their
    replicas use what they asked for on their nodes, and they move from the
    pending to the running list."""
    nodes = round_.cluster.nodes
    for p in reply.result.placements:
        job = round_.pending[p.job]  # indices refer to the round's pending list
        for r in p.replicas:
            n = nodes[r.node]
            for gpu in r.gpus:
                n.gpuFreeMilli[gpu] -= r.gpuMilli
            n.cpuMilliFree -= job.demand.cpuMilli
            n.memoryMibFree -= job.demand.memoryMib
        round_.running.append(make(
            RunningJobT, name=job.name, kind=job.kind, priority=job.priority, demand=job.demand,
            replicas=p.replicas, gang=job.gang, networkSensitivity=job.networkSensitivity,
            startTime=round_.now))
    placed = {p.job for p in reply.result.placements}
    round_.pending = [j for i, j in enumerate(round_.pending) if i not in placed]


def show(title: str, round_: ScheduleRequestT, reply: Reply) -> None:
    if not reply.ok:
        print(f"{title}: {enum_name(ErrorCode, reply.code)}: {reply.message}")
        return
    result = reply.result
    stages = {t.stage for t in result.timing}
    sent = "deltas" if "apply_delta" in stages else "a full snapshot"
    print(f"{title} (epoch {result.epoch}, sent as {sent}): {len(result.placements)} placed, "
          f"{len(result.unplaced)} unplaced")
    nodes = round_.cluster.nodes
    for p in result.placements:
        where = ", ".join(f"{nodes[r.node].name} {r.gpus}"
                          + (f"@{r.gpuMilli}m" if r.gpuMilli < 1000 else "") for r in p.replicas)
        print(f"  {p.name:14} {where}")
    for u in result.unplaced:
        print(f"  {u.name:14} unplaced: {enum_name(UnplacedReason, u.reason)} {u.detail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    endpoint = parser.parse_args().endpoint
    round_ = first_round()
    with Client(endpoint, timeout_ms=5000) as client:
        # The first round goes out as a full snapshot.
        reply = client.solve_incremental(round_)
        show("round 1", round_, reply)
        if not reply.ok:
            return 1
        # A minute later: what was placed runs, l40s-1 reports a failed GPU
        # and a fine-tuning job arrives. Only that goes out: the nodes that
        # changed, the jobs that left the queue and those that arrived.
        start_placed(round_, reply)
        round_.cluster.epoch = 2
        round_.now += 60
        round_.cluster.nodes[3].gpuHealthy = [True, True, True, False]
        round_.pending.append(make(JobT, name="finetune", kind=JobKind.Training, replicas=1,
                                   allowedGpuModels=["A100", "L40S"],
                                   demand=make(DemandT, gpus=2, cpuMilli=16000, memoryMib=131072)))
        reply = client.solve_incremental(round_)
        show("round 2", round_, reply)
    return 0 if reply.ok else 1


if __name__ == "__main__":
    sys.exit(main())
