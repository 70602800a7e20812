"""In-switch (NVLS) all-reduce as an MSCCL++ execution plan with a switch channel.

NCCL's NVLS all-reduce inside a node, and forest's in-switch star, in the form MSCCL++'s
executor runs (the same shape as MSCCL++'s ``allreduce_nvls_zero_copy`` DSL example): every
rank owns ``1/n`` of the buffer; after a barrier over memory channels (signal every peer, wait
for every peer), each rank issues one ``glres`` on its own slice of the switch channel - a
multimem load-reduce from every rank's buffer through the NVSwitch and a multimem store of the
sum back to all of them - and a final barrier keeps any rank from returning before every
slice is reduced.  The plan is in place (input = output) as NCCL's in-place all-reduce.
"""

from __future__ import annotations

import json
from typing import Any

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl.mscclpp_channels import switch_for

__all__ = ["nvls_allreduce_plan", "nvls_allreduce_json"]

UINT64_MAX = 2**64 - 1


def nvls_allreduce_plan(ngpus: int, *, name: str = "tacos_nvls_allreduce",
                        chunks_per_rank: int = 1, min_bytes: int = 0,
                        max_bytes: int = UINT64_MAX) -> dict[str, Any]:
    """The plan (JSON-ready dict) of an in-place NVLS all-reduce on ``ngpus`` ranks of one
    multicast/reduce switch, each rank reducing ``chunks_per_rank`` chunks of its slice."""
    if not 2 <= ngpus <= 9:
        raise TacosError(f"an NVLS plan joins 2 to 9 ranks (8 peers per operation), not {ngpus}")
    if chunks_per_rank < 1:
        raise TacosError("chunks_per_rank must be at least 1")
    nchunks = ngpus * chunks_per_rank
    gpus = []
    for r in range(ngpus):
        peers = [p for p in range(ngpus) if p != r]
        local = list(range(len(peers)))
        sync = [{"name": "signal", "channel_ids": local, "channel_type": "memory"},
                {"name": "wait", "channel_ids": local, "channel_type": "memory"},
                {"name": "nop"}]
        slot = {"switch_channel_id": 0, "index": r * chunks_per_rank, "size": chunks_per_rank}
        reduce = {"name": "glres", "src_buff": [dict(slot)], "dst_buff": [dict(slot)],
                  "channel_type": "switch", "reduce_op": "sum"}
        gpus.append({
            "id": r,
            "input_chunks": nchunks,
            "output_chunks": nchunks,
            "scratch_chunks": 0,
            "threadblocks": [{
                "id": 0,
                "ops": sync + [reduce, {"name": "nop"}] + sync[:2],
                "channels": [{"channel_type": "memory", "channel_ids": local},
                             {"channel_type": "switch", "channel_ids": [0]}],
                "remote_buffer_refs": [],
            }],
            "channels": [{"channel_type": "memory", "connected_to": peers},
                         {"channel_type": "switch", "buffer_type": "i",
                          "rank_groups": [{"size": ngpus, "ranks": list(range(ngpus))}]}],
            "remote_buffers": [],
            "semaphores": [],
        })
    return {"name": name, "collective": "allreduce", "protocol": "Simple", "inplace": True,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": min_bytes, "max_message_size": max_bytes}


def nvls_allreduce_json(topology: Topology, group: list[int] | None = None, *,
                        name: str = "tacos_nvls_allreduce", chunks_per_rank: int = 1,
                        min_bytes: int = 0, max_bytes: int = UINT64_MAX) -> str:
    """The NVLS all-reduce plan text for ``group`` (default all NPUs) of ``topology``; a
    :class:`~tacos.errors.TacosError` when no switch with multicast and reduce joins them."""
    group = list(range(len(topology.npus))) if group is None else list(group)
    if switch_for(topology, group, reduce=True) is None:
        raise TacosError("no switch declared 'with multicast, reduce' joins every NPU of the "
                         "group: an NVLS plan cannot run here",
                         hint="NVLS needs NVSwitch-3 (DGX-H100/H200/B200) inside one node")
    plan = nvls_allreduce_plan(len(group), name=name, chunks_per_rank=chunks_per_rank,
                               min_bytes=min_bytes, max_bytes=max_bytes)
    return json.dumps(plan, indent=2) + "\n"
