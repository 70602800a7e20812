"""Compiled greedy trial at scale: ``python -m benchmarks.bench_greedy_jit [--tacos-cpp BIN]``.

All-gather of 64 MiB, every link 50 GiB/s and 0.5 µs, one greedy trial (seed 0, trial 0).
Each measurement runs in a fresh process so its peak RSS is its own.  Rows:

* ``small``: 8x8 mesh and 8x8x8 torus, 1 chunk per NPU, ``max_merge=1``: the compiled trial,
  the pure-Python trial (``TACOS_JIT=0``) and, with ``--tacos-cpp``, TACOS C++'s greedy (a
  binary that prints ``cpu_s <seconds> time_us <collective time>`` for
  ``BIN torus3d X Y Z`` / ``BIN mesh2d W H``), interleaved ``--repeats`` times; medians of
  the CPU time of the trial alone (``time.process_time()``; the instance is built before) and
  ratios of medians measured in the same run;
* ``big``: 16x16x16 torus (4096 NPUs), ``max_merge=1``, compiled trial: CPU time, peak RSS;
* ``synth``: ``tacos.synthesize`` of the 8x8x8 torus all-gather with the default options
  (``max_merge='auto'``, default trials, one worker), compiled and pure-Python trials;
* ``growth``: k x k x k tori (``--growth 6,8,10,12,14,16``), ``max_merge=1`` and merged,
  compiled trial CPU and peak RSS, with the fitted exponents (CPU ~ N^e, least squares on
  log-log) and the extrapolation to 34x34x34;
* ``phases``: 8x8x8 and 12x12x12 tori, ``max_merge=1``: CPU of building the instance, the
  compiled trial, turning it into a :class:`~tacos.model.schedule.Schedule` (Transfer objects) and
  verifying it, with peak RSS;
* ``huge`` (``--huge``): 34x34x34 torus (39304 NPUs), merged (cap from the ``auto`` ladder's
  first rung, speculation on as by default).

The numba compile (first call in a process without a cache) is timed apart: ``compile``
runs in a process with ``NUMBA_CACHE_DIR`` pointing at an empty folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import tacos

MiB = 1 << 20
GiB = 1 << 30


def _child(kind: str, dims: list[int], cap: str, warm: bool) -> dict:
    from tacos import builders, limits
    from tacos.model.patterns import build
    from tacos.solvers.greedy.instance import build_instance
    from tacos.solvers.greedy.merge import merge_caps
    from tacos.solvers.greedy.trial import run_trial

    t0 = time.process_time()
    topo = (builders.torus if kind == "torus" else builders.mesh)(
        *dims, bandwidth=50 * GiB, latency=0.5e-6)
    n = topo.n_npus
    with limits.raised(deliveries=4 * 10**9):  # 39304^2 = 1.5e9 arrivals at 34x34x34
        coll = build("allgather", range(n), size=64 * MiB // n * n, chunks_per_npu=1)
    inst = build_instance(topo, coll)
    build_s = time.process_time() - t0
    c = 1 if cap == "1" else merge_caps(inst, "auto", 1)[0]
    warm_s = None
    if warm:  # import numba, compile (or load from the cache) on a tiny instance first
        from tacos.solvers.greedy import jit as greedy_jit

        t = time.process_time()
        if os.environ.get("TACOS_JIT") != "0":
            greedy_jit.kernels()
        small = build_instance(builders.mesh(2, 2, bandwidth=50 * GiB, latency=0.5e-6),
                               build("allgather", range(4), size=4 * MiB, chunks_per_npu=1))
        run_trial(small, 0, 0, c)
        warm_s = time.process_time() - t
    t = time.process_time()
    res = run_trial(inst, 0, 0, c)  # speculation as by default (off for equal 1-chunk sends)
    trial_s = time.process_time() - t
    return {"npus": n, "cap": c, "build_s": build_s, "warm_s": warm_s, "trial_s": trial_s,
            "makespan_us": res.makespan * 1e-9, "transfers": len(res.start),
            "compiled": res.chunk_ptr is not None,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _phases(k: int) -> dict:
    from tacos import builders
    from tacos.model.patterns import build
    from tacos.solvers.greedy.instance import build_instance
    from tacos.solvers.greedy.solver import to_schedule
    from tacos.solvers.greedy.trial import run_trial
    from tacos.solvers.registry import Problem

    topo = builders.torus(k, k, k, bandwidth=50 * GiB, latency=0.5e-6)
    n = topo.n_npus
    coll = build("allgather", range(n), size=64 * MiB // n * n, chunks_per_npu=1)
    clock = time.process_time
    t0 = clock()
    inst = build_instance(topo, coll)
    t1 = clock()
    run_trial(inst, 0, 0, 1, speculate=False)  # load the kernels
    t2 = clock()
    res = run_trial(inst, 0, 0, 1, speculate=False)
    t3 = clock()
    sched = to_schedule(Problem(topo, coll, {}), inst, res)
    t4 = clock()
    ok = tacos.verify(sched).ok
    t5 = clock()
    return {"npus": n, "instance_s": t1 - t0, "trial_s": t3 - t2, "schedule_s": t4 - t3,
            "verify_s": t5 - t4, "ok": ok, "transfers": len(sched.transfers),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _synth() -> dict:
    import tacos
    from tacos import builders

    topo = builders.torus(8, 8, 8, bandwidth=50 * GiB, latency=0.5e-6)
    coll = tacos.collective("allgather", list(range(512)), size=64 * MiB)
    if os.environ.get("TACOS_JIT") != "0":
        from tacos.solvers.greedy import jit as greedy_jit

        greedy_jit.kernels()
        tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)  # load the kernels
    t = time.process_time()
    sched = tacos.synthesize(topo, coll, solver="greedy", workers=1)
    return {"cpu_s": time.process_time() - t, "makespan_us": sched.makespan * 1e6,
            "trials": sched.meta.get("trials_run"), "ok": tacos.verify(sched).ok}


def _run_child(kind: str, dims: list[int], cap: str = "1", jit: bool = True,
               env_extra: dict | None = None) -> dict:
    env = dict(os.environ, TACOS_JIT="1" if jit else "0", **(env_extra or {}))
    argv = [sys.executable, "-m", "benchmarks.bench_greedy_jit", "--child", kind,
            ",".join(map(str, dims)), cap]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_cpp(binary: str, kind: str, dims: list[int]) -> dict:
    arg = "torus3d" if kind == "torus" else "mesh2d"
    out = subprocess.run([binary, arg, *map(str, dims)], capture_output=True, text=True,
                         check=True).stdout.split()
    return {"trial_s": float(out[1]), "makespan_us": float(out[3])}


def _growth(sides: list[int]) -> None:
    from benchmarks.bench_msccl_scale import _exponent

    print("| torus | NPUs | cap 1: trial CPU | peak RSS | merged: cap | trial CPU | peak RSS |")
    print("|" + "---|" * 7)
    res: dict[str, list[dict]] = {"1": [], "auto": []}
    for k in sides:
        for cap in res:
            res[cap].append(_run_child("torus", [k, k, k], cap))
        a, m = res["1"][-1], res["auto"][-1]
        print(f"| {k}x{k}x{k} | {k ** 3} | {a['trial_s']:.2f} s | {a['peak_rss_mib']:.0f} MiB | "
              f"{m['cap']} | {m['trial_s']:.2f} s | {m['peak_rss_mib']:.0f} MiB |", flush=True)
    print()
    n = [r["npus"] for r in res["1"]]
    for cap, rows in res.items():
        big = [i for i, r in enumerate(rows) if r["npus"] >= 512] or list(range(len(rows)))
        xs = [n[i] for i in big]
        ys = [rows[i]["trial_s"] for i in big]
        e = _exponent(xs, ys)
        if e is None:
            continue
        est = ys[-1] * (34 ** 3 / xs[-1]) ** e
        print(f"- {'max_merge=1' if cap == '1' else 'merged'}: trial CPU ~ N^{e:.2f} "
              f"(fit on N >= 512); 34x34x34 extrapolates to {est / 60:.0f} min")
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tacos-cpp", default=None, help="TACOS C++ benchmark binary")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="compile,small,big")
    ap.add_argument("--huge", action="store_true", help="also the 34x34x34 torus (merged)")
    ap.add_argument("--growth", default="6,8,10,12,14,16", help="torus sides for 'growth'")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child and args.child[0] == "synth":
        print(json.dumps(_synth()))
        return 0
    if args.child and args.child[0] == "phases":
        print(json.dumps(_phases(int(args.child[1]))))
        return 0
    if args.child:
        kind, dims, cap = args.child
        print(json.dumps(_child(kind, [int(x) for x in dims.split(",")], cap, warm=True)))
        return 0
    only = set(args.only.split(","))
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; "
          f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n")
    if "compile" in only:
        with tempfile.TemporaryDirectory() as tmp:
            r = _run_child("mesh", [8, 8], env_extra={"NUMBA_CACHE_DIR": tmp})
            c = _run_child("mesh", [8, 8], env_extra={"NUMBA_CACHE_DIR": tmp})
        print(f"- numba compile (empty cache): {r['warm_s']:.2f} s CPU; "
              f"loading the cached code: {c['warm_s']:.2f} s CPU\n")
    if "small" in only:
        print("| topology | NPUs | compiled trial CPU | pure-Python trial CPU | TACOS C++ CPU | "
              "compiled / C++ | Python / C++ | makespan ours / C++ (µs) | transfers |")
        print("|" + "---|" * 9)
        for kind, dims in (("mesh", [8, 8]), ("torus", [8, 8, 8])):
            jit, py, cpp = [], [], []
            for _ in range(args.repeats):
                jit.append(_run_child(kind, dims, jit=True))
                py.append(_run_child(kind, dims, jit=False))
                if args.tacos_cpp:
                    cpp.append(_run_cpp(args.tacos_cpp, kind, dims))
            mj = statistics.median(r["trial_s"] for r in jit)
            mp = statistics.median(r["trial_s"] for r in py)
            assert all(r["compiled"] for r in jit) and not any(r["compiled"] for r in py)
            assert len({r["makespan_us"] for r in jit + py}) == 1
            if cpp:
                mc = statistics.median(r["trial_s"] for r in cpp)
                cpp_cols = (f"{mc * 1e3:.1f} ms | {mj / mc:.3f} | {mp / mc:.2f} | "
                            f"{jit[0]['makespan_us']:.1f} / {cpp[0]['makespan_us']:.1f}")
            else:
                cpp_cols = f"- | - | - | {jit[0]['makespan_us']:.1f} / -"
            print(f"| {kind} {'x'.join(map(str, dims))} | {jit[0]['npus']} | "
                  f"{mj * 1e3:.1f} ms | {mp * 1e3:.1f} ms | {cpp_cols} | "
                  f"{jit[0]['transfers']} |", flush=True)
        print()
    if "growth" in only:
        _growth([int(x) for x in args.growth.split(",")])
    if "synth" in only:
        rows = {}
        for jit in ("1", "0", "1", "0", "1", "0"):
            argv = [sys.executable, "-m", "benchmarks.bench_greedy_jit", "--child", "synth",
                    "-", "-"]
            out = subprocess.run(argv, capture_output=True, text=True, check=True,
                                 env=dict(os.environ, TACOS_JIT=jit))
            rows.setdefault(jit, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
        mj = statistics.median(r["cpu_s"] for r in rows["1"])
        mp = statistics.median(r["cpu_s"] for r in rows["0"])
        assert {r["makespan_us"] for r in rows["1"]} == {r["makespan_us"] for r in rows["0"]}
        print(f"- `tacos.synthesize`, 8x8x8 torus all-gather, default options "
              f"({rows['1'][0]['trials']} trials, one worker): compiled {mj:.2f} s CPU, "
              f"pure-Python {mp:.2f} s CPU ({mp / mj:.1f}x), same schedule "
              f"({rows['1'][0]['makespan_us']:.1f} µs), verified\n")
    if "phases" in only:
        print("| torus | NPUs | instance CPU | compiled trial CPU | Schedule (Transfer objects) "
              "CPU | verify CPU | transfers | peak RSS | verified |")
        print("|" + "---|" * 9)
        for k in (8, 12):
            argv = [sys.executable, "-m", "benchmarks.bench_greedy_jit", "--child", "phases",
                    str(k), "-"]
            out = subprocess.run(argv, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {k}x{k}x{k} | {r['npus']} | {r['instance_s']:.2f} s | {r['trial_s']:.2f} s "
                  f"| {r['schedule_s']:.2f} s | {r['verify_s']:.2f} s | {r['transfers']} | "
                  f"{r['peak_rss_mib']:.0f} MiB | {'yes' if r['ok'] else 'NO'} |", flush=True)
        print()
    rows = []
    if "big" in only:
        rows.append(("torus", [16, 16, 16], "1"))
    if args.huge:
        rows.append(("torus", [34, 34, 34], "auto"))
    if rows:
        print("| topology | NPUs | cap | instance build CPU | compiled trial CPU | peak RSS | "
              "makespan (µs) | transfers |")
        print("|" + "---|" * 8)
    for kind, dims, cap in rows:
        r = _run_child(kind, dims, cap)
        print(f"| {kind} {'x'.join(map(str, dims))} | {r['npus']} | {r['cap']} | "
              f"{r['build_s']:.1f} s | {r['trial_s']:.1f} s | {r['peak_rss_mib']:.0f} MiB | "
              f"{r['makespan_us']:.1f} | {r['transfers']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
