"""CPU that runtime shaping adds to ``tacosc EXAMPLE -o plan.xml``: ``--shape auto`` (the
default) against ``--shape fixed``, per example, for one or more source trees in one run.

Every compile runs in its own process (``python -P -m tacos.cli EXAMPLE --trials 2 --workers 1
-q --shape S -o plan.xml``, the CLI round trip of ``tests/test_end_to_end.py``); its CPU is the
child's user + system time.  ``--src LABEL=DIR`` times the tacos package of another tree (e.g.
the branch point, unpacked with ``git archive``) in the same run; the median of ``--repeat``
runs is quoted.

``python -m benchmarks.bench_shaping_cpu [--src before=/tmp/before] [--src after=.]
[--repeat 3] [EXAMPLE ...]`` prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("mesh4x4.tdl", "dgx_a100_group4.tdl", "multidim.tdl", "torus3d.tdl")


def compile_cpu(src: Path, example: Path, shape: str) -> float:
    """CPU seconds of one ``tacosc`` compile of ``example`` with ``--shape shape``, running
    the tacos package under ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-P", "-m", "tacos.cli", str(example), "--trials", "2",
                        "--workers", "1", "-q", "--shape", shape, "-o",
                        str(Path(tmp) / "plan.xml")], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def npus(example: Path) -> int:
    """How many NPUs the example's topology has."""
    import tacos

    return len(tacos.load(example).topology.npus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("examples", nargs="*", default=list(EXAMPLES))
    ap.add_argument("--src", action="append", default=[],
                    help="LABEL=DIR: time the tacos package under DIR (default: this tree)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    trees = [tuple(s.split("=", 1)) for s in args.src] or [("this tree", str(ROOT))]
    print("| example | NPUs | tree | fixed CPU s | auto CPU s | shaping adds s |")
    print("|---|---|---|---|---|---|")
    for name in args.examples:
        example = ROOT / "examples" / name
        for label, src in trees:
            cpu = {s: statistics.median(compile_cpu(Path(src), example, s)
                                        for _ in range(args.repeat))
                   for s in ("fixed", "auto")}
            print(f"| {name} | {npus(example)} | {label} | {cpu['fixed']:.1f} | "
                  f"{cpu['auto']:.1f} | {cpu['auto'] - cpu['fixed']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
