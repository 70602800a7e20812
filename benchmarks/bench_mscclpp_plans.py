"""Do the MSCCL++ plans tacosc writes load where they claim to?

For every shipped example with its own collective and every preset's all-reduce of 64 MiB,
``tacosc FILE [-c allreduce --size 64MiB] --format mscclpp -o plan.json`` as a user runs it;
then, on the file written: MSCCL++'s loader rules (:func:`tacos.msccl.mscclpp_loader.
loader_problems`), the executor's size check at the collective's own size
(:func:`~tacos.msccl.mscclpp_loader.size_problems`), the channel types the topology can carry
(:func:`tacos.msccl.mscclpp_channels.channel_type_violations`), whether switch channels are
used, the runtime model's time and what ``tacosc`` noted (re-synthesized chunk counts, the
sizes a plan serves).  A file tacosc refuses to write (multi-tenant jobs, reshards, broadcast
roots MSCCL++ has no collective for) is counted as refused, with the reason.

``python -m benchmarks.bench_mscclpp_plans [--out docs/benchmarks]`` prints the markdown table
and writes ``mscclpp-plans.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import tempfile
import time
from pathlib import Path

from tacos.cli import main
from tacos.importers import load_any
from tacos.msccl.mscclpp_channels import channel_type_violations
from tacos.msccl.mscclpp_loader import loader_problems, size_problems

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "tacos" / "presets"
EXAMPLES = ROOT / "examples"
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")


def cases() -> list[tuple[str, list[str]]]:
    """(label, tacosc argv without -o) of every case."""
    out = []
    for f in sorted(EXAMPLES.glob("*.tdl")):
        spec = load_any(str(f))
        coll = spec.collective
        if coll is None or coll.kind not in KINDS or len(spec.collectives) != 1:
            continue
        out.append((f"examples/{f.name}", [str(f), "--format", "mscclpp"]))
    for f in sorted(PRESETS.glob("*.tdl")):
        out.append((f"presets/{f.name} allreduce 64MiB",
                    [str(f), "-c", "allreduce", "--size", "64MiB", "--format", "mscclpp"]))
    return out


def run_case(label: str, argv: list[str], folder: Path) -> dict[str, object]:
    """Compile one case and check the file written."""
    path = folder / "plan.json"
    path.unlink(missing_ok=True)
    err, out = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main([*argv, "-o", str(path), "-q"])
        except SystemExit as exc:
            rc = int(exc.code or 1)
    wall = time.perf_counter() - t0
    row: dict[str, object] = {"case": label, "wall_s": round(wall, 1)}
    if rc != 0 or not path.exists():
        reason = (err.getvalue().strip().splitlines() or ["?"])[0]
        return {**row, "status": "refused", "reason": reason[:120]}
    doc = json.loads(path.read_text())
    spec = load_any(argv[0])
    size = _size(argv, spec)
    notes = [line[6:] for line in err.getvalue().splitlines() if line.startswith("note: ")]
    channels = channel_type_violations(doc, spec.topology, _ranks(argv, spec))
    return {**row, "status": "written",
            "loads": not loader_problems(doc),
            "loads_at_size": not size_problems(doc, size),
            "impossible_channels": len(channels),
            "switch": any(ch["channel_type"] == "switch" for g in doc["gpus"]
                          for ch in g["channels"]),
            "chunks": max(doc["gpus"][0]["input_chunks"], doc["gpus"][0]["output_chunks"]),
            "note": "; ".join(n[:70] for n in notes if "window starts" not in n)}


def _size(argv: list[str], spec) -> int:
    if "--size" in argv:
        from tacos.model.units import parse_size

        return int(parse_size(argv[argv.index("--size") + 1]))
    return int(spec.collective.size)


def _ranks(argv: list[str], spec) -> list[int] | None:
    if "-c" in argv:
        return None
    return list(spec.collective.group)


def main_cli() -> None:
    """Run every case and print/write the results."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in cases():
            rows.append(run_case(label, argv, Path(tmp)))
            print(rows[-1], flush=True)
    written = [r for r in rows if r["status"] == "written"]
    print(f"\n{len(written)} of {len(rows)} written; "
          f"{sum(bool(r['loads']) for r in written)} load; "
          f"{sum(bool(r['loads_at_size']) for r in written)} load at their own size; "
          f"{sum(int(r['impossible_channels']) for r in written)} impossible channels; "
          f"{sum(bool(r['switch']) for r in written)} use switch channels")
    if args.out:
        keys = ["case", "status", "loads", "loads_at_size", "impossible_channels", "switch",
                "chunks", "note", "reason", "wall_s"]
        with open(args.out / "mscclpp-plans.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, keys)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k, "") for k in keys})


if __name__ == "__main__":
    main_cli()
