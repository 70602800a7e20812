"""The greedy's port trial, compiled against Python: ``python -m benchmarks.bench_greedy_ports``.

For each switched system (all-gather of ``--size`` over every GPU, ``--chunks`` per GPU), the
port instance is built once, the compiled kernel loaded once (its load is timed apart), then
the compiled trial (:func:`tacos.solvers.greedy.jit_ports.run_port_trial_compiled`) and the
Python trial (:func:`tacos.solvers.greedy.ports.run_port_trial`) run interleaved on the same
``(seed, trial, cap)`` for ``--repeats`` trials (caps cycling over 1 and the ``auto`` ladder's
first rung).  Printed: the median CPU seconds per trial of each (``time.process_time``), the
ratio of the medians measured in this run, and whether every pair of trials gave the same
transfers (they must).

Usage::

    python -m benchmarks.bench_greedy_ports [--repeats 5] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time

SYSTEMS = {
    "2x DGX-2": "use dgx2(nodes=2)",
    "2x MI250": "use mi250(nodes=2)",
    "4x DGX-H100": "use dgx_h100(nodes=4)",
    "leaf-spine 16, 4:1": "fattree host[16] leaves=4 spines=2 down 64GB/s 1us up 32GB/s 1us",
    "8x DGX-A100": "use dgx_a100(nodes=8)",
    "32x DGX-A100": "use dgx_a100(nodes=32)",
}
MiB = 1 << 20


def _same(a, b) -> bool:
    """Whether two trial results hold the same transfers."""
    return (a.makespan == b.makespan and list(a.start) == list(b.start)
            and list(a.end) == list(b.end) and list(a.link) == list(b.link)
            and list(a.route) == list(b.route)
            and list(a.chunk_tuples()) == list(b.chunk_tuples()))


def measure(text: str, size: int, chunks: int, repeats: int) -> dict:
    """Median CPU seconds per trial, compiled and Python, on one system."""
    import tacos
    from tacos.model.patterns import build
    from tacos.solvers.greedy import jit_ports
    from tacos.solvers.greedy.merge import merge_caps
    from tacos.solvers.greedy.ports import build_port_instance, run_port_trial
    from tacos.solvers.greedy.solver import relay_npus
    from tacos.solvers.islands import find_islands

    topo = tacos.parse(text).topology
    npus = topo.live_npus
    n = len(npus)
    coll = build("allgather", npus, size=size // (n * chunks) * (n * chunks),
                 chunks_per_npu=chunks)
    allowed = relay_npus(topo, coll, {})
    inst = build_port_instance(topo, coll, allowed, find_islands(topo, allowed))
    ladder = merge_caps(inst, "auto", 1)
    caps = [1, ladder[0]]
    fast, slow, same = [], [], True
    for i in range(repeats):
        cap = caps[i % len(caps)]
        t0 = time.process_time()
        a = jit_ports.run_port_trial_compiled(inst, 0, i, cap)
        t1 = time.process_time()
        b = run_port_trial(inst, 0, i, cap)
        t2 = time.process_time()
        fast.append(t1 - t0)
        slow.append(t2 - t1)
        same &= _same(a, b)
    cf, cs = statistics.median(fast), statistics.median(slow)
    return {"npus": n, "requests": inst.total_need, "compiled": cf, "python": cs,
            "ratio": cs / cf if cf > 0 else float("inf"), "same": same}


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=64 * MiB)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    only = {x for x in args.only.split(",") if x}
    from tacos.solvers.greedy import jit_ports

    t0 = time.process_time()
    jit_ports.prepare_kernel()
    measure("fattree host[4] leaves=2 spines=1 down 50GB/s 1us up 50GB/s 1us", MiB, 1, 1)
    load = time.process_time() - t0  # numba import, cached kernel load, one tiny trial
    print(f"machine: {platform.machine()} {os.cpu_count()} cores (shared), python "
          f"{platform.python_version()}, date {dt.date.today()}; kernel load {load:.2f} s CPU "
          f"(numba import, cached kernel, one tiny trial)")
    print(f"all-gather {args.size // MiB} MiB, {args.chunks} chunk(s) per GPU, "
          f"{args.repeats} trials each (medians, CPU s per trial)")
    print("| system | GPUs | requests | Python s | compiled s | ratio | same transfers |")
    print("|---|---:|---:|---:|---:|---:|---|", flush=True)
    for name, text in SYSTEMS.items():
        if only and name not in only:
            continue
        r = measure(text, args.size, args.chunks, args.repeats)
        print(f"| {name} | {r['npus']} | {r['requests']} | {r['python']:.4f} | "
              f"{r['compiled']:.4f} | {r['ratio']:.1f}x | {'yes' if r['same'] else 'NO'} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
