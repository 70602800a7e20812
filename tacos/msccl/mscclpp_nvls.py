"""In-switch (NVLS) all-reduce as an MSCCL++ execution plan with a switch channel.

NCCL's NVLS all-reduce inside a node, and forest's in-switch star, in the form MSCCL++'s
executor runs (the same shape as MSCCL++'s ``allreduce_nvls_zero_copy`` DSL example): every
rank owns ``1/n`` of the buffer; after a barrier over memory channels (signal every peer, wait
for every peer), each rank's thread blocks issue one ``glres`` each on their part of its slice
of the switch channel - a multimem load-reduce from every rank's buffer through the NVSwitch and
a multimem store of the sum back to all of them - and a final barrier keeps any rank from
returning before every slice is reduced.  The thread-block count is the runtime model's choice
at the plan's size.  The plan is in place (input = output) as NCCL's in-place all-reduce.
"""

from __future__ import annotations

import json
from typing import Any

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl.mscclpp_channels import switch_for

__all__ = ["best_threadblocks", "nvls_allreduce_json", "nvls_allreduce_plan"]

UINT64_MAX = 2**64 - 1
#: Thread-block counts tried per rank (NCCL's NVLS runs 16 channels on H100).
TB_CHOICES = (1, 2, 4, 8, 16)


def nvls_allreduce_plan(ngpus: int, *, name: str = "tacos_nvls_allreduce",
                        threadblocks: int = 1, min_bytes: int = 0,
                        max_bytes: int = UINT64_MAX) -> dict[str, Any]:
    """The plan (JSON-ready dict) of an in-place NVLS all-reduce on ``ngpus`` ranks of one
    multicast/reduce switch.  Each rank's slice is cut into ``threadblocks`` chunks, one per
    thread block: thread block 0 runs the opening barrier over memory channels and releases
    the others through semaphores, every thread block reduces its chunk with one ``glres``,
    and thread block 0 acquires them all before the closing barrier."""
    if not 2 <= ngpus <= 9:
        raise TacosError(f"an NVLS plan joins 2 to 9 ranks (8 peers per operation), not {ngpus}")
    if not 1 <= threadblocks <= 32:
        raise TacosError("threadblocks must be 1 to 32")
    t = threadblocks
    nchunks = ngpus * t
    gpus = []
    for r in range(ngpus):
        peers = [p for p in range(ngpus) if p != r]
        local = list(range(len(peers)))
        sync = [{"name": "signal", "channel_ids": local, "channel_type": "memory"},
                {"name": "wait", "channel_ids": local, "channel_type": "memory"},
                {"name": "nop"}]
        tbs = []
        for b in range(t):
            slot = {"switch_channel_id": 0, "index": r * t + b, "size": 1}
            reduce = {"name": "glres", "src_buff": [dict(slot)], "dst_buff": [dict(slot)],
                      "channel_type": "switch", "reduce_op": "sum"}
            if b == 0:
                others = list(range(t - 1))  # semaphore k: tb 0 -> tb k+1; t-1+k: back
                back = [t - 1 + k for k in others]
                ops = list(sync)
                if others:
                    ops.append({"name": "sem_release", "semaphore_ids": others})
                ops += [reduce, {"name": "nop"}]
                if others:
                    ops += [{"name": "sem_acquire", "semaphore_ids": back}, {"name": "nop"}]
                ops += sync[:2]
                channels = [{"channel_type": "memory", "channel_ids": local},
                            {"channel_type": "switch", "channel_ids": [0]}]
            else:
                ops = [{"name": "sem_acquire", "semaphore_ids": [b - 1]}, {"name": "nop"},
                       reduce, {"name": "nop"},
                       {"name": "sem_release", "semaphore_ids": [t - 1 + b - 1]}]
                channels = [{"channel_type": "switch", "channel_ids": [0]}]
            tbs.append({"id": b, "ops": ops, "channels": channels, "remote_buffer_refs": []})
        gpus.append({
            "id": r,
            "input_chunks": nchunks,
            "output_chunks": nchunks,
            "scratch_chunks": 0,
            "threadblocks": tbs,
            "channels": [{"channel_type": "memory", "connected_to": peers},
                         {"channel_type": "switch", "buffer_type": "i",
                          "rank_groups": [{"size": ngpus, "ranks": list(range(ngpus))}]}],
            "remote_buffers": [],
            "semaphores": [{"init_value": 0} for _ in range(2 * (t - 1))],
        })
    return {"name": name, "collective": "allreduce", "protocol": "Simple", "inplace": True,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": min_bytes, "max_message_size": max_bytes}


def nvls_allreduce_json(topology: Topology, group: list[int] | None = None, *,
                        name: str = "tacos_nvls_allreduce", threadblocks: int | None = None,
                        nbytes: int = 1 << 26, min_bytes: int = 0,
                        max_bytes: int = UINT64_MAX) -> str:
    """The NVLS all-reduce plan text for ``group`` (default all NPUs) of ``topology``; a
    :class:`~tacos.errors.TacosError` when no switch with multicast and reduce joins them.
    ``threadblocks`` None: the count in :data:`TB_CHOICES` the runtime model times fastest at
    ``nbytes`` (ties to fewer)."""
    group = list(range(len(topology.npus))) if group is None else list(group)
    if switch_for(topology, group, reduce=True) is None:
        raise TacosError("no switch declared 'with multicast, reduce' joins every NPU of the "
                         "group: an NVLS plan cannot run here",
                         hint="NVLS needs NVSwitch-3 (DGX-H100/H200/B200) inside one node")
    if threadblocks is None:
        threadblocks = best_threadblocks(topology, group, nbytes)
    plan = nvls_allreduce_plan(len(group), name=name, threadblocks=threadblocks,
                               min_bytes=min_bytes, max_bytes=max_bytes)
    return json.dumps(plan, indent=2) + "\n"


def best_threadblocks(topology: Topology, group: list[int], nbytes: int) -> int:
    """The thread-block count of :data:`TB_CHOICES` whose plan the MSCCL++ runtime model times
    fastest at ``nbytes`` on ``group`` (ties to fewer thread blocks)."""
    from tacos.msccl.mscclpp_reader import read_plan
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    best: tuple[float, int] | None = None
    for t in TB_CHOICES:
        plan, _ = read_plan(nvls_allreduce_plan(len(group), threadblocks=t))
        time = estimate_mscclpp(plan, topology, nbytes, ranks=group).time
        if best is None or time < best[0] * (1 - 1e-9):
            best = (time, t)
    return best[1] if best else 1
