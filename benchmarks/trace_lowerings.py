"""Every MSCCL lowering a ``tacosc`` compile runs, one line each on stderr:
``python -m benchmarks.trace_lowerings T.tdl -o plan.xml --report [tacosc options]``.

Each line gives the plan's transfer count, the options that shape the body (instances,
paired peers, port order), the rounds of channel assignment and the step builds the lowering
ran, its CPU seconds (this process) and its outcome (channels and steps, or the error).  The
compile's total CPU and peak RSS follow at the end.  Used to account for the default solver's
CPU at 512 ranks (``docs/benchmarks/scale-default.md``).
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Run ``tacos.cli.main(argv)`` with :func:`tacos.msccl.lower.lower` traced."""
    import tacos.msccl.lower as lower_mod
    import tacos.msccl.shape_choose as choose_mod
    from tacos.cli import main as tacosc

    real_lower, real_assign, real_build = (lower_mod.lower, lower_mod.assign_channels,
                                           lower_mod.build_steps)
    counts = {"rounds": 0, "builds": 0}

    def assign(*a: Any, **k: Any) -> Any:
        counts["rounds"] += 1
        return real_assign(*a, **k)

    def build(*a: Any, **k: Any) -> Any:
        counts["builds"] += 1
        return real_build(*a, **k)

    def traced(schedule: Any, *, options: Any = None, progress: Any = None) -> Any:
        counts["rounds"] = counts["builds"] = 0
        t0 = time.process_time()
        error: Exception | None = None
        try:
            program = real_lower(schedule, options=options, progress=progress)
            outcome = f"ok {program.nchannels} channels, {program.num_steps} steps"
        except Exception as exc:  # noqa: BLE001 - reported, then raised again
            error, outcome = exc, f"error: {str(exc).splitlines()[0][:100]}"
        o = options or lower_mod.MscclOptions()
        print(f"lower {len(schedule.transfers)} transfers, {o.instances} instances, "
              f"paired={o.pair_peers}, ports={o.port_order}: rounds {counts['rounds']}, "
              f"builds {counts['builds']}, {time.process_time() - t0:.1f} s CPU, {outcome}",
              file=sys.stderr, flush=True)
        if error is not None:
            raise error
        return program

    lower_mod.lower = choose_mod.lower = traced  # type: ignore[assignment]
    lower_mod.assign_channels = assign  # type: ignore[assignment]
    lower_mod.build_steps = build  # type: ignore[assignment]
    t0 = time.process_time()
    rc = tacosc(sys.argv[1:] if argv is None else argv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total {time.process_time() - t0:.1f} s CPU (this process), peak RSS {peak:.0f} MiB",
          file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
