"""Calibration of the runtime model against published nccl-tests sweeps.

``nccl_allreduce_8gpu.csv`` (a copy of ``../shared/calibration/``; sources in its header):
all_reduce_perf busbw on one 8x A100 server (NCCL's own choice) and one 8x H100 server (NVLS
forced), NCCL 2.18.5, one process driving all 8 GPUs (``-g 8``).  :func:`calibration_errors`
times every point with :func:`tacos.runtime.nccl_model.estimate_nccl` in that setting
(``sweep=True``) on the ``dgx_a100_node`` and ``dgx_h100_node`` presets.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

#: The targets of issue 26: |busbw error| at sizes >= 64 MiB and at 16-32 MiB.
TARGET_LARGE = 0.10
TARGET_MEDIUM = 0.15
#: (preset, CSV column, NCCL algorithm forced or None) per machine.
MACHINES: dict[str, tuple[str, str, str | None]] = {
    "a100": ("dgx_a100_node", "a100_busbw_GBps", None),
    "h100": ("dgx_h100_node", "h100_busbw_GBps", "nvls"),
}


@dataclass(frozen=True)
class CalibrationPoint:
    """One size of one machine: measured and modelled busbw (GB/s) and the relative error."""

    machine: str
    size: int
    measured: float
    modelled: float
    algorithm: str
    protocol: str

    @property
    def error(self) -> float:
        """modelled / measured - 1."""
        return self.modelled / self.measured - 1.0

    @property
    def target(self) -> float | None:
        """The issue's tolerance at this size (None below 16 MiB)."""
        if self.size >= 64 << 20:
            return TARGET_LARGE
        if self.size >= 16 << 20:
            return TARGET_MEDIUM
        return None


@cache
def measurements() -> tuple[tuple[int, dict[str, float]], ...]:
    """``(size_bytes, {column: busbw GB/s})`` rows of the calibration CSV."""
    text = files("tacos.runtime").joinpath("nccl_allreduce_8gpu.csv").read_text()
    rows = [line for line in text.splitlines() if line and not line.startswith("#")]
    out = []
    for rec in csv.DictReader(rows):
        size = int(rec.pop("size_bytes"))
        out.append((size, {k: float(v) for k, v in rec.items()}))
    return tuple(out)


def calibration_errors(machine: str | None = None) -> list[CalibrationPoint]:
    """Every calibration point of ``machine`` (``a100``, ``h100``; default both), modelled."""
    from tacos.frontends.tdl import load_tdl
    from tacos.frontends.tdl_includes import preset_folder
    from tacos.runtime.nccl_model import estimate_nccl

    out = []
    for name, (preset, column, algo) in MACHINES.items():
        if machine is not None and name != machine:
            continue
        topo = load_tdl(preset_folder() / f"{preset}.tdl").topology
        for size, cols in measurements():
            est = estimate_nccl(topo, "allreduce", size, algorithm=algo, sweep=True)
            out.append(CalibrationPoint(name, size, cols[column], est.busbw / 1e9,
                                        est.detail["algorithm"], est.detail["protocol"]))
    return out
