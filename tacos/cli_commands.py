"""``tacosc`` commands besides compile: info, verify, presets, solvers, import.

Each takes ``--json`` (one JSON document on stdout) and returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from tacos.atomic import check_writable, write_text
from tacos.cli import _info_parser, _params, _size, _verify_parser, limits_of
from tacos.errors import TacosError, UsageError


def cmd_info(argv: Sequence[str]) -> int:
    """``tacosc info``."""
    from tacos.importers import load_any
    from tacos.info import describe, format_info
    from tacos.progress import TerminalReporter

    args = _info_parser().parse_args(argv)
    if args.astra_sim:
        check_writable(args.astra_sim, "ASTRA-sim config")
    with limits_of(args):
        with TerminalReporter(enabled=not args.json).phase(f"loading {args.topology}"):
            spec = load_any(args.topology, _params(args.param), include_dirs=args.include_dir)
        if args.astra_sim:
            from tacos.backends.astra_sim import network_yaml

            write_text(args.astra_sim, network_yaml(spec.topology))
        text = json.dumps(describe(spec), indent=2) if args.json else \
            format_info(spec, per_npu=True if args.per_npu else None)
    print(text)
    return 0


def presets() -> list[dict[str, Any]]:
    """Every shipped preset: name, full description (its leading comment) and parameters."""
    folder = resources.files("tacos") / "presets"
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".tdl"):
            continue
        lines = entry.read_text(encoding="utf-8").splitlines()
        desc = []
        for ln in lines:
            if not ln.startswith("#"):
                break
            desc.append(ln.lstrip("#").strip())
        params = {}
        for ln in lines:
            m = re.match(r"\s*param\s+(\w+)\s*=\s*(.+?)\s*(#.*)?$", ln)
            if m:
                params[m.group(1)] = m.group(2)
        out.append({"name": entry.name[:-4], "description": " ".join(desc),
                    "parameters": params})
    return out


def cmd_presets(argv: Sequence[str]) -> int:
    """``tacosc presets``: every preset with its whole description and its parameters."""
    p = argparse.ArgumentParser(prog="tacosc presets", description="List the shipped presets "
                                "(use them in TDL as  use NAME(param=value)).")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    items = presets()
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    for item in items:
        print(item["name"])
        print(textwrap.fill(item["description"], width=88, initial_indent="    ",
                            subsequent_indent="    "))
        if item["parameters"]:
            shown = ", ".join(f"{k} = {v}" for k, v in item["parameters"].items())
            print(textwrap.fill(f"parameters: {shown}", width=88, initial_indent="    ",
                                subsequent_indent="        "))
    return 0


def cmd_solvers(argv: Sequence[str]) -> int:
    """``tacosc solvers``: every solver and the options it accepts."""
    from tacos.solvers.options import COMMON_OPTIONS, describe, range_text
    from tacos.solvers.registry import SOLVERS

    p = argparse.ArgumentParser(prog="tacosc solvers", description="List the solvers and "
                                "their options (-O NAME=VALUE on the command line, NAME=value "
                                "in tacos.synthesize).")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    table: dict[str, Any] = {}
    for name in SOLVERS:
        try:
            opts = describe(name)
        except TacosError as exc:
            table[name] = {"available": False, "reason": exc.message}
            continue
        table[name] = {"available": True, "options": {
            k: {"doc": o.doc, "default": o.default, "choices": list(o.choices),
                "range": list(o.range) if o.range else None}
            for k, o in opts.items() if k not in COMMON_OPTIONS}}
    if args.json:
        print(json.dumps({"common": {k: o.doc + (f" (range {range_text(o)})" if o.range
                                                 else "") for k, o in COMMON_OPTIONS.items()},
                          "solvers": table}, indent=2, default=str))
        return 0
    print("common options: " + ", ".join(COMMON_OPTIONS))
    for name, info in table.items():
        print(name + ("" if info["available"] else f"  (not available: {info['reason']})"))
        if info["available"] and not info["options"]:
            print("    (only the common options)")
        for k, o in info.get("options", {}).items():
            where = f" (range {o['range'][0]:,g} to {o['range'][1]:,g})" if o["range"] else ""
            print(textwrap.fill(f"{k}: {o['doc']}{where}", width=88, initial_indent="    ",
                                subsequent_indent="        "))
    return 0


def cmd_import(argv: Sequence[str]) -> int:
    """``tacosc import FORMAT FILE``: write the TDL of an imported topology."""
    from tacos.importers import FORMATS, to_tdl

    p = argparse.ArgumentParser(
        prog="tacosc import", description="Import a topology and write it as TDL (read it, "
        "edit it, then use it like any TDL file).",
        epilog="formats: " + "; ".join(f"{k}: {v[1]}" for k, v in FORMATS.items()))
    p.add_argument("format", choices=sorted(FORMATS), help="input format")
    p.add_argument("file", help="the file to import")
    p.add_argument("--node", help="nccl-topo: node preset for the NVLink part, e.g. "
                   "dgx_a100_node, dgx1")
    p.add_argument("--nvlink-matrix", help="nccl-topo: nvidia-smi topo -m output for the "
                   "NVLink part")
    p.add_argument("--nodes", type=int, help="copies of the node, joined through their NICs")
    p.add_argument("--nic", help="NIC bandwidth, e.g. 25GB/s or 200Gb/s")
    p.add_argument("--nic-alpha", help="NIC latency, e.g. 2us")
    p.add_argument("--nvlink", help="bandwidth per NVLink (nvidia-smi, nccl-topo matrices)")
    p.add_argument("--kind", help="taccl: ndv2, dgx2, hubandspoke or custom")
    p.add_argument("--profile-size", help="taccl: input size the betas were measured for")
    p.add_argument("-o", "--output", help="write the TDL here (default: stdout)")
    p.add_argument("--json", action="store_true", help="print a summary as JSON")
    args = p.parse_args(argv)
    from tacos.cli_flags import check_ranges

    check_ranges(args, {"nodes": (1, 100_000)})
    options = {k: v for k, v in (("node", args.node), ("nvlink_matrix", args.nvlink_matrix),
                                 ("nodes", args.nodes), ("nic", args.nic),
                                 ("nic_alpha", args.nic_alpha), ("nvlink", args.nvlink),
                                 ("kind", args.kind), ("size", args.profile_size))
               if v is not None}
    text = to_tdl(args.file, args.format, **options)
    from tacos.frontends.tdl import parse_tdl

    spec = parse_tdl(text, args.output or f"{args.file} (imported)")
    if args.output:
        write_text(args.output, text)
    elif not args.json:
        print(text, end="")
    topo = spec.topology
    summary = {"format": args.format, "file": args.file, "output": args.output,
               "npus": topo.n_npus, "switches": len(topo.switches), "links": len(topo.links)}
    if args.json:
        if not args.output:
            summary["tdl"] = text
        print(json.dumps(summary, indent=2))
    elif args.output:
        print(f"{args.output}: {topo.n_npus} NPUs, {len(topo.switches)} switches, "
              f"{len(topo.links)} links")
    return 0


def _verify_folder(folder: Path, args: Any) -> int:
    """Verify every MSCCL XML file of ``folder`` and that their windows form one set."""
    from tacos.msccl.sweep_xml import check_set
    from tacos.msccl.verify import verify_xml_file

    files = sorted(folder.glob("*.xml"))
    if not files:
        raise _input_error(TacosError(f"{folder}: no .xml file to verify"))
    odd = [f for f in files if not f.is_file()]
    if odd:  # a pipe or device would block the read (and the runtime's load of the folder)
        raise _input_error(TacosError(
            f"{odd[0]}: not a regular file",
            hint="the folder should hold only the MSCCL XML files of one set"))
    spec = _verify_topology(args)
    topology = spec.topology if spec is not None else None
    results = [(f, verify_xml_file(f, topology=topology, max_steps=args.max_steps,
                                   strict=args.strict)) for f in files]
    problems = check_set(files)
    ok = all(r.ok for _, r in results) and not problems
    gaps = _size_gaps(files) if not problems else []
    if args.json:
        from tacos.report_schema import envelope

        files = [{**r.as_dict(), "source": str(f), "format": "msccl-xml"} for f, r in results]
        print(json.dumps(envelope("verify-folder", {"files": files, "set_problems": problems,
                                                    "size_gaps": gaps}, ok), indent=2))
    else:
        for f, r in results:
            print(f"{f.name}: " + ("verified" if r.ok else r.text()))
        print("windows: " + ("disjoint and contiguous (the files load as one set)"
                             if not problems else "; ".join(problems)))
        for line in gaps:
            print(f"gap: {line}")
    return 0 if ok else 1


def _size_gaps(files: list[Path]) -> list[str]:
    """The power-of-two sizes (to 1 TiB) the folder's windows leave to NCCL, and why
    (:func:`tacos.msccl.size_fit.window_gaps`); empty when a file does not read back."""
    from tacos.msccl.size_fit import window_gaps
    from tacos.msccl.xml_reader import load_xml

    try:
        return window_gaps([(f.name, load_xml(f)) for f in files])
    except TacosError:
        return []


def cmd_verify(argv: Sequence[str]) -> int:
    """``tacosc verify``: MSCCL XML, MSCCL++ JSON or a tacos JSON schedule."""

    from tacos.cli_flags import MAX_STEPS, check_ranges

    args = _verify_parser().parse_args(argv)
    check_ranges(args, {"max_steps": (2, MAX_STEPS)})
    with limits_of(args):
        return _verify(args)


def _declared_group(path: Path, topology: Any, groups: list) -> Any:
    """An MSCCL++ plan's ranks as the topology file's declared group of its size, if any."""
    from tacos.msccl.ranks import resolve_ranks

    try:
        ngpus = len(json.loads(path.read_text(encoding="utf-8")).get("gpus", []))
        return resolve_ranks(topology, ngpus, declared=groups)[0]
    except (ValueError, AttributeError, TacosError):
        return None  # the verifier reports the broken plan


def _input_error(exc: TacosError) -> TacosError:
    """``exc`` with exit code 2: ``verify`` keeps 1 for a plan that breaks a rule, so CI can
    tell it from a missing or unreadable input."""
    if exc.exit_code == 1:
        exc.exit_code = 2
    return exc


def _verify_topology(args: argparse.Namespace) -> Any:
    """The ``--topology`` spec, None without one; its errors are input errors (exit 2)."""
    if not args.topology:
        return None
    from tacos.importers import load_any

    try:
        return load_any(args.topology, _params(args.param), include_dirs=args.include_dir)
    except TacosError as exc:
        raise _input_error(exc) from None


def _verify(args: argparse.Namespace) -> int:
    from tacos.verify_plan import sniff

    path = Path(args.plan)
    if path.is_dir():
        return _verify_folder(path, args)
    if not path.is_file():
        raise _input_error(TacosError(f"{path}: " + ("not a regular file" if path.exists()
                                                     else "no such file")))
    topology, groups = None, []
    spec = _verify_topology(args)
    if spec is not None:
        topology = spec.topology
        groups = [c.group for c in spec.collectives]
    try:
        with open(path, "rb") as fh:  # a regular file (checked above); format from its head
            text = fh.read(1 << 16).decode("utf-8", "replace")
    except OSError as exc:
        raise _input_error(TacosError(f"{path}: cannot read it ({exc.strerror})")) from None
    try:
        kind = sniff(text)
    except TacosError as exc:
        raise _input_error(TacosError(f"{path}: {exc.message}", hint=exc.hint)) from None
    timed = ("msccl-xml", "mscclpp-json")
    if args.size and kind not in timed:
        raise UsageError("--size checks (and with --topology times) an MSCCL XML or MSCCL++ "
                         "plan", hint="leave --size out for a tacos schedule")
    if args.ranks is not None and (kind not in timed or topology is None):
        raise UsageError("--ranks maps an MSCCL plan's ranks to NPUs of --topology",
                         hint="give --topology too, or leave --ranks out")
    from tacos.progress import TerminalReporter

    reporter = TerminalReporter(enabled=not args.json)
    if kind == "msccl-xml":  # a phase per pass: large plans take a while
        from tacos.msccl.ranks import parse_ranks
        from tacos.msccl.verify import verify_xml_file

        ranks = parse_ranks(args.ranks, topology) if args.ranks is not None else None
        report = verify_xml_file(path, topology=topology, max_steps=args.max_steps,
                                 strict=not args.lenient, ranks=ranks, groups=groups,
                                 nbytes=_size(args.size) if args.size else None,
                                 progress=reporter)
    else:
        from tacos.msccl.ranks import parse_ranks
        from tacos.verify_plan import verify

        ranks = parse_ranks(args.ranks, topology) if args.ranks is not None else None
        if ranks is None and topology is not None and kind == "mscclpp-json" and groups:
            ranks = _declared_group(path, topology, groups)
        with reporter.phase(f"verifying {path}"):
            report = verify(path, topology=topology,
                            nbytes=_size(args.size) if args.size else None, ranks=ranks)
    if args.json:
        from tacos.report_schema import envelope

        doc = {"source": str(path), "format": kind, **report.as_dict()}
        print(json.dumps(envelope("verify", doc, report.ok), indent=2))
    else:
        print(report.text())
    return 0 if report.ok else 1
