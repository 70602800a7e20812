"""Greedy trials in one process, on a local process pool and on a Dask cluster (tacos.engines).

For each problem, 16 greedy trials (``max_merge=1``: exactly 16 tasks, seed 0) are run

* ``serial``: ``workers=1``;
* ``pool``: ``workers=2`` (forked processes, started and ended by the call);
* ``dask``: ``cluster=ADDRESS`` of a ``LocalCluster(processes=True, n_workers=2,
  threads_per_worker=1)`` started once by this script (an existing cluster, as a user would
  give; its start-up is reported apart, as is the first call, which connects and loads the
  compiled kernels in the workers).

Reported per engine: median wall time (and its range), the parent's CPU
(``time.process_time``), the workers' CPU (pool: ``RUSAGE_CHILDREN`` of the reaped workers;
dask: the workers' ``process_time`` deltas, their heartbeats included) and the total; and
whether the schedule's JSON is the same bytes as the serial one (it must be).  Repeats are
interleaved engine by engine.

Usage::

    nice python -m benchmarks.bench_engines --repeats 3
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import tacos

MiB = 1 << 20


def _problems():
    import tacos
    from tacos.builders import torus
    from tacos.model.patterns import build

    dgx = tacos.parse("use dgx_a100(nodes=4)").topology
    tor = torus(8, 8, 8, bandwidth=50e9, latency=0.5e-6)
    return [
        ("dgx_a100 x4 (32 GPUs, NVSwitch + NICs), allgather 64 MiB, 8 chunks/GPU", dgx,
         build("allgather", dgx.live_npus, size=64 * MiB, chunks_per_npu=8)),
        ("8x8x8 torus (512 NPUs), allgather 64 MiB, 1 chunk/NPU", tor,
         build("allgather", tor.live_npus, size=64 * MiB)),
    ]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _workers_cpu(client) -> float:
    return sum(client.run(time.process_time).values()) if client is not None else 0.0


def _run(topo, coll, where: dict, client) -> tuple[float, float, float, str]:
    from tacos.synthesize import synthesize

    c0, k0, d0, w0 = time.process_time(), _children_cpu(), _workers_cpu(client), \
        time.perf_counter()
    s = synthesize(topo, coll, solver="greedy", seed=0, trials=16, max_merge=1, bound=False,
                   **where)
    wall = time.perf_counter() - w0
    parent = time.process_time() - c0
    workers = _children_cpu() - k0 + _workers_cpu(client) - d0
    tacos.verify(s).raise_if_failed()
    return wall, parent, workers, tacos.emit(s, "json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    from tacos.engines import close_clients

    t0 = time.perf_counter()
    cluster = LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                           dashboard_address=None)
    client = Client(cluster, set_as_default=False)
    print(f"LocalCluster(2 processes x 1 thread) start-up: {time.perf_counter() - t0:.2f} s "
          "wall")
    address = cluster.scheduler_address
    engines = {"serial": ({"workers": 1}, None), "pool": ({"workers": 2}, None),
               "dask": ({"cluster": address}, client)}
    try:
        for label, topo, coll in _problems():
            print(f"\n## {label}")
            _run(topo, coll, {"workers": 1}, None)  # loads the kernels in this process
            w, p, k, _ = _run(topo, coll, {"cluster": address}, client)
            print(f"dask first call (connect, version check, kernels loaded in the workers): "
                  f"{w:.2f} s wall, {p:.2f} s parent CPU, {k:.2f} s workers CPU")
            rows: dict[str, list[tuple[float, float, float]]] = {e: [] for e in engines}
            texts: dict[str, set[str]] = {e: set() for e in engines}
            for _ in range(args.repeats):
                for name, (where, cl) in engines.items():
                    w, p, k, text = _run(topo, coll, where, cl)
                    rows[name].append((w, p, k))
                    texts[name].add(text)
            same = all(texts[e] == texts["serial"] and len(texts[e]) == 1 for e in engines)
            print("| engine | wall (s) | wall min-max | parent CPU (s) | workers CPU (s) | "
                  "total CPU (s) |")
            print("| --- | --- | --- | --- | --- | --- |")
            for name in engines:
                w, p, k = (statistics.median(x[i] for x in rows[name]) for i in range(3))
                walls = [x[0] for x in rows[name]]
                print(f"| {name} | {w:.2f} | {min(walls):.2f}-{max(walls):.2f} | {p:.2f} | "
                      f"{k:.2f} | {p + k:.2f} |")
            print(f"same JSON bytes on every engine and repeat: {same}")
    finally:
        close_clients()
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
