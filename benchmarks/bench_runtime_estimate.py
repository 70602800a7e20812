"""CPU of one runtime-model estimate of a large MSCCL program, nothing cached.

The greedy plan of an example (default ``multidim.tdl``, 64 NPUs) is lowered with
``--instances`` instances (default 4: about 58,000 steps) and timed by
:func:`tacos.runtime.estimate_program` at two sizes in two protocols, each time on a fresh
copy of the program (so no folded model is reused); the median CPU seconds of ``--repeat``
runs is printed with the estimate.  Run it under ``PYTHONPATH=OTHER_TREE`` to time another
tree's tacos (it uses only ``estimate_program``), and with ``TACOS_JIT=0`` for the Python
event loop.

``python -m benchmarks.bench_runtime_estimate [--example multidim.tdl] [--instances 4]
[--repeat 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    import tacos
    from tacos.msccl.lower import MscclOptions, lower
    from tacos.runtime import estimate_program
    from tacos.synthesize import synthesize

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="multidim.tdl")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spec = tacos.load(ROOT / "examples" / args.example)
    schedule = synthesize(spec.topology, spec.collective, solver="greedy", trials=2, workers=1)
    program = lower(schedule, options=MscclOptions(instances=args.instances))
    group = list(schedule.collective.group)
    steps = sum(len(tb.steps) for g in program.gpus for tb in g.tbs)
    # load the compiled loop (if any) outside the timings
    estimate_program(replace(program, gpus=tuple(list(program.gpus))), spec.topology, 1 << 20,
                     ranks=group)
    print(f"{args.example}, greedy, {args.instances} instances: {steps} steps")
    print("| message | protocol | CPU s (median) | runtime-model time s |")
    print("|---|---|---|---|")
    for nbytes in (1 << 26, 1 << 30):
        for proto in ("Simple", "LL"):
            cpu = []
            for _ in range(args.repeat):
                fresh = replace(program, gpus=tuple(list(program.gpus)), proto=proto)
                t = time.process_time()
                est = estimate_program(fresh, spec.topology, nbytes, ranks=group)
                cpu.append(time.process_time() - t)
            print(f"| {nbytes >> 20} MiB | {proto} | {statistics.median(cpu):.2f} | "
                  f"{est.time!r} |", flush=True)


if __name__ == "__main__":
    main()
