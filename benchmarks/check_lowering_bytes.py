"""Hashes of the MSCCL XML lowering of every plan ``auto`` lowers, and their runtime floors:
``python -m benchmarks.check_lowering_bytes [--only NAMES] [--out FILE]``.

Runs the default compile (solver ``auto``) of each named example in this process, records
every schedule it lowers (:func:`tacos.runtime.plans.lowering_of`), then lowers each again
under several option sets (the default, two instances, a small step limit that forces cuts,
single peers paired, port order) and prints, per lowering, the SHA-256 of its XML text, its
:func:`~tacos.solvers.auto_floor.thread_block_floor` and
:func:`~tacos.solvers.auto_floor.runtime_floor`, and the compile's verdict lines.  Two trees
give the same output exactly when the lowering and the floors are unchanged: run it in each
(``cd TREE && python -m benchmarks.check_lowering_bytes --out F``) and ``diff`` the files.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

EXAMPLES = ("tpu_v4", "torus3d", "mesh4x4", "dgx2_2node", "mi250_2node", "ndv2_2node")


def _variants():
    """(label, MscclOptions) of every lowering each plan gets."""
    from tacos.msccl.lower import MscclOptions

    return [("default", MscclOptions()),
            ("instances2", MscclOptions(instances=2)),
            ("steps64", MscclOptions(max_steps_per_tb=64)),
            ("pair", MscclOptions(pair_peers=True)),
            ("ports", MscclOptions(port_order=True)),
            ("inplace-ll", MscclOptions(inplace=True, proto="LL"))]


def check(name: str, root: Path) -> list[str]:
    """Lines describing every lowering of the plans ``auto`` lowers on example ``name``."""
    import tacos.runtime.plans as plans
    from tacos.cli import main
    from tacos.errors import TacosError
    from tacos.msccl.lower import lower
    from tacos.msccl.xml_writer import emit_xml
    from tacos.solvers.auto_floor import runtime_floor, thread_block_floor

    seen: list = []
    original = plans.lowering_of

    def recording(schedule, options=None, **kwargs):
        if options is None and not any(s is schedule for s in seen):
            seen.append(schedule)
        return original(schedule, options, **kwargs)

    plans.lowering_of = recording
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            main([str(root / "examples" / f"{name}.tdl")])
    finally:
        plans.lowering_of = original
    lines = [f"## {name}"]
    lines += [f"out {re.sub(r'synthesis [0-9.]+ [mu]?s', 'synthesis (time)', line)}"
              for line in out.getvalue().splitlines()]
    for k, schedule in enumerate(seen):
        coll = schedule.collective
        lines.append(f"plan {k}: {len(schedule.transfers)} transfers")
        for label, opts in _variants():
            try:
                program = lower(schedule, options=opts)
            except TacosError as err:
                lines.append(f"  {label}: refused {err}")
                continue
            digest = hashlib.sha256(emit_xml(program).encode()).hexdigest()
            tb = thread_block_floor(program, schedule.topology, int(coll.size))
            try:
                floor = runtime_floor(program, schedule.topology, int(coll.size), coll.group)
                full = f"{floor:.9e}"
            except TacosError as err:
                full = f"refused {err}"
            lines.append(f"  {label}: {digest} steps={program.num_steps} tb_floor={tb:.9e} "
                         f"floor={full}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print (or write to ``--out``) the lines of every example."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(EXAMPLES), help="comma-separated examples")
    parser.add_argument("--out", default="", help="file to write instead of standard output")
    args = parser.parse_args(argv)
    os.environ["TACOS_CACHE_DIR"] = ""
    root = Path.cwd()
    lines = []
    for name in args.only.split(","):
        lines += check(name, root)
        print(f"checked {name}", file=sys.stderr)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
