"""Refit the runtime model's calibrated parameters (``docs/runtime-model.md``, Calibration).

The five fitted values of ``tacos/runtime/hardware.toml``:

* ``sweep_host_us`` (A100, H100): the median measured time per call at 1-64 KiB, where the
  one-process ``-g 8`` sweep measures its host (median, not a least-squares fit);
* ``fill_steps_simple``, ``fill_steps_ll128`` (A100 ring) and ``fill_chunks_nvls`` (H100):
  least squares on log(busbw) over the sizes >= 1 MiB where NCCL runs that protocol.

Run: ``python -m benchmarks.fit_runtime``; prints the values to copy into the data file.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from scipy.optimize import least_squares

from benchmarks import topologies as T
from tacos.runtime import estimate_nccl, hardware
from tacos.runtime.calibration import MACHINES, measurements
from tacos.runtime.estimate import bus_factor


def _host(column: str) -> float:
    f = bus_factor("allreduce", 8)
    return statistics.median(size * f / (cols[column] * 1e9)
                             for size, cols in measurements() if size <= 65536)


def main() -> None:
    for gen, (preset, column, algo) in MACHINES.items():
        base = hardware(gen)
        topo = T.preset(preset)
        host = _host(column)
        keys = ["fill_chunks_nvls"] if algo == "nvls" else ["fill_steps_simple",
                                                            "fill_steps_ll128"]

        def residuals(x, base=base, host=host, keys=keys, topo=topo, algo=algo,
                      column=column):
            hw = replace(base, sweep_host=host,
                         common={**base.common, **dict(zip(keys, x, strict=True))})
            out = []
            for size, cols in measurements():
                if size >= 1 << 20:
                    est = estimate_nccl(topo, "allreduce", size, algorithm=algo, hardware=hw,
                                        sweep=True)
                    out.append(math.log(est.busbw / 1e9 / cols[column]))
            return out

        fit = least_squares(residuals, [4.0] * len(keys), bounds=(0, 64))
        print(f"[gpu.{gen}] sweep_host_us = {host * 1e6:.2f}")
        for k, v in zip(keys, fit.x, strict=True):
            print(f"[common] {k} = {v:.3f}")
        print(f"  rms log error {math.sqrt(sum(r * r for r in fit.fun) / len(fit.fun)):.3f}")


if __name__ == "__main__":
    main()
