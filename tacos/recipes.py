"""The one-line recipe that runs a written plan, per output format (``docs/running.md``).

``tacosc`` prints it after writing a plan, so the user sees the exact environment the runtime
reads: MSCCL XML for NCCL with the MSCCL executor (legacy), MSCCL++ JSON for MSCCL++'s
executor or its NCCL shim, the tuner CSV for NCCL's example tuner plugin.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["recipe"]


#: nccl-tests binary per collective.
PERF = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
        "reducescatter": "reduce_scatter_perf", "alltoall": "alltoall_perf",
        "broadcast": "broadcast_perf", "reduce": "reduce_perf"}


def recipe(fmt: str, path: str | Path, *, nranks: int | None = None,
           kind: str = "allreduce") -> str:
    """The command line that runs the plan at ``path`` written in ``fmt`` (``xml``,
    ``mscclpp`` or ``nccl-tuner``; ``xml-dir`` for a folder of XML files) for ``nranks``
    ranks of collective ``kind``."""
    where = Path(path).resolve()
    np = nranks or 8
    perf = PERF.get(kind, "all_reduce_perf")
    if fmt in ("xml", "xml-dir"):
        folder = where if fmt == "xml-dir" else where.parent
        return (f"run: MSCCL_ALGO_DIR={folder} NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "
                f"mpirun -np {np} ./{perf} -g 1 -b 1M -e 64M   # msccl-executor-nccl; the "
                "folder must hold only MSCCL XML (legacy; docs/running.md)")
    if fmt == "mscclpp":
        return (f"run: LD_PRELOAD=libmscclpp_nccl.so torchrun --nproc_per_node={np} "
                f"your_script.py   # registers mscclpp.ExecutionPlan('{where}', rank) "
                "(MSCCL++ 0.9; docs/running.md)")
    if fmt == "nccl-tuner":
        return (f"run: NCCL_TUNER_PLUGIN=libnccl-tuner-example.so "
                f"NCCL_TUNER_CONFIG_FILE={where} NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "
                "<your NCCL program>   # docs/running.md")
    return f"wrote {where}"
