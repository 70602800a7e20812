"""``tacosc cost``, ``tacosc explore`` and ``tacosc allocate``.

Forms::

    tacosc cost TOPO.tdl --collective allreduce --size 64MiB [--group 0-7 ...] [--model ring ...]
    tacosc explore TOPO.tdl --model gpt-20b [--tokens 32768] [--algorithm nccl] [--top 3]
    tacosc allocate TOPO.tdl|'Ring(4)_FC(2)_Switch(8)' --budget 300GB/s --op allreduce:64MiB
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tacos.errors import UsageError


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _t(x: float | None) -> str:
    from tacos.model.units import format_time

    return format_time(x) if x is not None else "-"


def _pct(x: float | None) -> str:
    return f"{x * 100:+.2f}%" if x is not None else "-"


def _bw(x: float) -> str:
    return f"{x / 1e9:.4g} GB/s" if math.isfinite(x) else "-"


def _load(args: argparse.Namespace):
    from tacos import load
    from tacos.cli import _params

    return load(args.topology, _params(args.param), include_dirs=args.include_dir)


def _parser(**kwargs: str) -> argparse.ArgumentParser:
    """A design-space command's parser, with ``--limit`` and ``--include-dir`` as every
    command that reads TDL has."""
    from tacos.cli import _add_input_options

    p = argparse.ArgumentParser(**kwargs)
    _add_input_options(p)
    return p


def _run(argv: Sequence[str], parser: Callable[[], argparse.ArgumentParser],
         run: Callable[[argparse.Namespace], int]) -> int:
    """Parse ``argv`` and run the command under its ``--limit`` options (docs/tdl.md)."""
    from tacos.cli import limits_of
    from tacos.cli_flags import check_common, check_ranges

    args = parser().parse_args(argv)
    check_common(args)  # --seed
    check_ranges(args, {"confirm": (0, 100), "chunks": (1, 1_000_000)})
    with limits_of(args):
        return run(args)


def _size(text: str) -> int:
    from tacos.cli import _size as parse

    return parse(text)


def _npu(topology, text: str) -> int:
    names = {n.name: n.id for n in topology.npus}
    if text in names:
        return names[text]
    if text.isdigit() and int(text) < topology.n_npus:
        return int(text)
    raise UsageError(f"{text!r} is not an NPU of the topology",
                     hint="give NPU ids (0-7,9) or names such as node[0].gpu[3]")


def parse_group(topology, spec: str) -> list[int]:
    """``0-7,12`` or NPU names separated by commas -> NPU ids."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if sep and lo.isdigit() and hi.isdigit():
            out += list(range(int(lo), int(hi) + 1))
        elif part:
            out.append(_npu(topology, part))
    return out


def _groups(topology, args) -> list[list[int]] | None:
    if args.group and args.groups:
        raise UsageError("give --group or --groups, not both")
    if args.group:
        return [parse_group(topology, g) for g in args.group]
    if args.groups:
        from tacos.cost.allocate import parse_op

        op = parse_op(f"allreduce:1:{args.groups}")
        return op.groups(list(topology.live_npus))
    return None


# -- tacosc cost -----------------------------------------------------------------------------
def _cost_parser() -> argparse.ArgumentParser:
    p = _parser(
        prog="tacosc cost",
        description="Closed-form α-β times of a collective on process groups of a topology, "
        "placement-aware on the physical links, each next to the simulated time of the "
        "baseline schedule that runs the same algorithm (and of a synthesized plan).")
    p.add_argument("topology", help="TDL file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("-c", "--collective", default="allreduce", help="collective kind")
    p.add_argument("--size", default="64MiB", help="size in the nccl-tests convention")
    p.add_argument("--group", action="append", default=[], metavar="NPUS",
                   help="a process group, e.g. 0-7 or node[0].gpu[0],node[1].gpu[0]; repeat "
                   "for groups that run at the same time (default: every NPU)")
    p.add_argument("--groups", metavar="inner=K|outer=K",
                   help="cut every NPU into concurrent groups of K consecutive NPUs (inner) "
                   "or of K NPUs at stride N/K (outer)")
    p.add_argument("--root", help="root NPU of a rooted collective (default: first member)")
    p.add_argument("--chunks", type=int, default=1, help="chunks per NPU (default 1)")
    p.add_argument("--relays", choices=("members", "all"), default="members",
                   help="relay sends between NPUs without a route through the groups' NPUs "
                   "only (default, as the baselines) or through any NPU")
    p.add_argument("-m", "--model", action="append", default=[],
                   help="model(s) to show (default: all): ring, biring, direct, "
                   "halving-doubling, tree, hierarchical, nccl, axonn")
    p.add_argument("--no-baseline", action="store_true", help="skip the baseline schedules")
    p.add_argument("--synthesize", metavar="SOLVER", help="also synthesize (e.g. greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--explain", action="store_true", help="print every model's steps")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def cmd_cost(argv: Sequence[str]) -> int:
    """``tacosc cost`` (under its ``--limit`` options)."""
    return _run(argv, _cost_parser, _cost)


def _cost(args: argparse.Namespace) -> int:
    from tacos.cost.compare import compare
    from tacos.cost.models import MODELS
    from tacos.cost.node_dims import with_node_dims
    from tacos.model.collective import ROOTED_COLLECTIVES

    spec = _load(args)
    topo = with_node_dims(spec.topology)  # presets' nodes and rails become dimensions
    groups = _groups(topo, args)
    root = None
    if args.collective in ROOTED_COLLECTIVES:
        root = _npu(topo, args.root) if args.root else (groups or [topo.live_npus])[0][0]
    if args.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    res = compare(topo, args.collective, _size(args.size), models=args.model or MODELS,
                  groups=groups, root=root, chunks=args.chunks, relays=args.relays,
                  baselines=not args.no_baseline, synthesize=args.synthesize, seed=args.seed)
    if args.json:
        from tacos.report_schema import envelope

        print(json.dumps(envelope("cost", _cost_json(res), True), indent=2))
        return 0
    first = res.rows[0].estimate
    print(f"{args.collective} of {_fmt_size(first.size)} on {first.groups} group(s) of "
          f"{first.n} NPUs ({topo.name or args.topology})")
    header = ["model", "formula", "α_eff", "β_eff", "predicted", "baseline", "simulated",
              "error"]
    if res.synthesized is not None:
        header += [f"vs {res.solver}"]
    rows = []
    for r in res.rows:
        e = r.estimate
        row = [e.model, e.formula or "-", _t(e.alpha) if e.time else "-",
               _bw(e.beta) if e.time else "-", _t(e.time), r.baseline,
               _t(r.simulated), _pct(r.error)]
        if res.synthesized is not None:
            row.append(_pct(res.error_vs_synthesized(r)))
        rows.append(row)
    print(_table(header, rows))
    if res.synthesized is not None:
        print(f"\nsynthesized ({res.solver}, seed {args.seed}): {_t(res.synthesized)} simulated")
    notes = [f"  {r.estimate.model}: {n}" for r in res.rows
             for n in (*r.estimate.notes, r.note) if n]
    if notes:
        print("\nnotes:\n" + "\n".join(notes))
    if args.explain:
        print("\n" + _explain(res, topo))
    return 0


def _fmt_size(x: float) -> str:
    from tacos.model.units import format_size

    return format_size(x)


def _explain(res, topology) -> str:
    out = []
    for r in res.rows:
        p = r.estimate.plan
        if p is None:
            continue
        out.append(f"{r.estimate.model}:")
        for i, st in enumerate(p.steps):
            alpha, beta, link = st.effective(r.estimate.size)
            why = "critical path"
            if link is not None:
                lk = topology.links[link.link]
                why = (f"{topology.node_name(lk.src)}->{topology.node_name(lk.dst)} shared by "
                       f"{link.users} sends")
            out.append(f"  step {i + 1} {st.step.label} ({st.step.mode}, {len(st.sends)} sends, "
                       f"max load {max(s.send.load for s in st.sends)}): "
                       f"{_t(st.time(r.estimate.size))}; α_eff {_t(alpha)}, β_eff {_bw(beta)}"
                       + (f" [{why}]" if why else ""))
    return "\n".join(out)


def _cost_json(res) -> dict[str, Any]:
    from tacos.report import json_safe

    rows = []
    for r in res.rows:
        e = r.estimate
        rows.append({"model": e.model, "kind": e.kind, "size": e.size, "npus": e.n,
                     "groups": e.groups, "formula": e.formula, "predicted": e.time,
                     "alpha_eff": e.alpha, "beta_eff": e.beta, "baseline": r.baseline,
                     "simulated": r.simulated, "schedule_time": r.schedule_time,
                     "error": r.error, "error_vs_synthesized": res.error_vs_synthesized(r),
                     "notes": list(e.notes) + ([r.note] if r.note else [])})
    return json_safe({"models": rows, "synthesized": res.synthesized, "solver": res.solver})


# -- tacosc explore --------------------------------------------------------------------------
def _explore_parser() -> argparse.ArgumentParser:
    p = _parser(
        prog="tacosc explore",
        description="Rank AxoNN-style 4D parallel configurations (G_x, G_y, G_z, G_data) and "
        "placements by predicted communication time per batch: the placement-aware model "
        "first, synthesis for the top few.")
    p.add_argument("topology", help="TDL file (its first --gpus NPUs are the ranks)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--gpus", type=int, help="GPUs to use (default: every live NPU)")
    p.add_argument("--model", default="gpt-20b", help="gpt-5b, gpt-10b, gpt-20b (default), "
                   "gpt-40b, gpt-80b (the paper's Table I), or 'custom' with --layers/--hidden")
    p.add_argument("--layers", type=int, help="transformer blocks (custom model)")
    p.add_argument("--hidden", type=int, help="hidden size (custom model)")
    p.add_argument("--tokens", type=int, default=32768,
                   help="tokens per batch (default 32768: 16 sequences of 2048)")
    p.add_argument("--bytes-per-element", type=float, default=2.0, help="default 2 (bf16)")
    p.add_argument("--algorithm", default="nccl",
                   help="collective model for the groups (default nccl; ring, ...)")
    p.add_argument("--placements", choices=("all", "axonn"), default="all",
                   help="all nesting orders (default) or AxoNN's X<Y<Z<data only")
    p.add_argument("--top", type=int, default=3, help="configurations to synthesize")
    p.add_argument("--show", type=int, default=15, help="rows to print")
    p.add_argument("--solver", default="greedy", help="synthesizer for the top few")
    p.add_argument("--no-synthesize", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return p


MAX_LAYERS = 100_000
"""Most transformer blocks ``tacosc explore`` prices (the model lists every layer)."""


def _check_model_numbers(layers: int, hidden: int, args: argparse.Namespace) -> None:
    """Model numbers in range before any work: counts at least 1, at most :data:`MAX_LAYERS`
    blocks, a finite positive element size."""
    from tacos.limits import MAX_INTEGER

    for name, value, top in (("--layers", layers, MAX_LAYERS), ("--hidden", hidden, MAX_INTEGER),
                             ("--tokens", args.tokens, MAX_INTEGER),
                             ("--top", args.top, MAX_INTEGER), ("--show", args.show, MAX_INTEGER)):
        if not (0 if name in ("--top", "--show") else 1) <= value <= top:
            raise UsageError(f"{name} must be a whole number from "
                             f"{0 if name in ('--top', '--show') else 1} to {top:,}, not {value}")
    if args.gpus is not None and args.gpus < 1:
        raise UsageError(f"--gpus must be at least 1, not {args.gpus}")
    bpe = args.bytes_per_element
    if not math.isfinite(bpe) or not 0 < bpe <= 64:
        raise UsageError(f"--bytes-per-element must be a number above 0 and at most 64, "
                         f"not {bpe}")


def cmd_explore(argv: Sequence[str]) -> int:
    """``tacosc explore`` (under its ``--limit`` options)."""
    return _run(argv, _explore_parser, _explore)


def _explore(args: argparse.Namespace) -> int:
    from tacos.cost.axonn import GPT_MODELS, transformer_layers
    from tacos.cost.explore import explore

    if args.model != "custom" and (args.layers or args.hidden):
        raise UsageError(f"--layers and --hidden describe a custom model, not {args.model}",
                         hint="pass --model custom, or drop them")
    if args.model == "custom":
        if not args.layers or not args.hidden:
            raise UsageError("a custom model needs --layers and --hidden")
        n_layers, hidden = args.layers, args.hidden
    elif args.model in GPT_MODELS:
        n_layers, hidden, _ = GPT_MODELS[args.model]
    else:
        raise UsageError(f"unknown model {args.model!r}",
                         hint=f"use one of {', '.join(GPT_MODELS)} or 'custom'")
    _check_model_numbers(n_layers, hidden, args)
    spec = _load(args)
    ranked = explore(spec.topology, transformer_layers(n_layers, hidden, args.tokens),
                     gpus=args.gpus, algorithm=args.algorithm,
                     bytes_per_element=args.bytes_per_element, top=args.top,
                     synthesize=None if args.no_synthesize else args.solver,
                     placements=args.placements, seed=args.seed)
    axonn_rank = {id(r): i + 1 for i, r in enumerate(sorted(ranked, key=lambda r: r.axonn))}
    if args.json:
        from tacos.report import json_safe
        from tacos.report_schema import envelope

        configurations = json_safe([{
            "grid": list(r.config.grid), "placement": r.config.placement(),
            "model": r.model, "axonn": r.axonn, "axonn_rank": axonn_rank[id(r)],
            "synthesized": r.synthesized, "breakdown": r.breakdown} for r in ranked])
        print(json.dumps(envelope("explore", {"configurations": configurations}, True),
                         indent=2))
        return 0
    print(f"{args.model} ({n_layers} blocks, hidden {hidden}), {args.tokens} tokens per batch, "
          f"{len(ranked)} configurations on {args.gpus or len(spec.topology.live_npus)} GPUs; "
          f"times per batch")
    rows = []
    for i, r in enumerate(ranked[:args.show]):
        rows.append([str(i + 1), r.config.label(), r.config.placement(), _t(r.model),
                     _t(r.axonn), str(axonn_rank[id(r)]), _t(r.synthesized)])
    print(_table(["rank", "Gx x Gy x Gz x Gdata", "placement", f"{args.algorithm} model",
                  "AxoNN eq.", "AxoNN rank", "synthesized"], rows))
    return 0


# -- tacosc allocate -------------------------------------------------------------------------
def _allocate_parser() -> argparse.ArgumentParser:
    p = _parser(
        prog="tacosc allocate",
        description="Split a per-NPU bandwidth budget across the dimensions of a "
        "multi-dimensional topology to minimize a workload's communication time (or time x "
        "cost), searched with the analytical model and confirmed by simulation.")
    p.add_argument("topology", help="TDL file whose links carry dimensions, or the seed's "
                   "notation, e.g. 'Ring(4)_FC(2)_Switch(8)'")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--budget", required=True, help="total bandwidth per NPU, e.g. 300GB/s")
    p.add_argument("--latency", help="per-dimension latency for the notation form, e.g. "
                   "0.5us,0.5us,1us (default 0.5us each)")
    p.add_argument("--op", action="append", default=[], metavar="KIND:SIZE[:inner=K|outer=K]"
                   "[:xN]", help="a workload operation, run after the previous one "
                   "(default: the collectives declared in the file)")
    p.add_argument("--model", default="hierarchical", help="cost model (default hierarchical)")
    p.add_argument("--pipelined", action="store_true",
                   help="each operation keeps every dimension busy at once (chunks pipelined "
                   "across dimensions) instead of running dimension after dimension")
    p.add_argument("--prices", help="$ per GB/s per dimension (comma-separated) or 'seed' "
                   "(seed 000 Table II): minimize time x cost")
    p.add_argument("--minimum", default="1GB/s", help="smallest bandwidth of a dimension")
    p.add_argument("--grid-step", default="10GB/s", help="exhaustive check grid (0: none)")
    p.add_argument("--confirm", type=int, default=3,
                   help="candidates to simulate (optimum, grid best, EqualBW, ...; 0: none)")
    p.add_argument("--solver", default="greedy", help="synthesizer for the confirmation")
    p.add_argument("--no-synthesize", action="store_true",
                   help="confirm with the baseline schedule only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", help="plot time against the split")
    p.add_argument("--json", action="store_true")
    return p


def _allocation_topology(args):
    import re

    from tacos import parse

    if Path(args.topology).exists() or args.topology.endswith(".tdl"):
        spec = _load(args)
        return spec.topology, spec.collectives
    if not re.fullmatch(r"[A-Za-z]+\(\w+\)(_[A-Za-z]+\(\w+\))*", args.topology):
        raise UsageError(f"{args.topology!r} is neither a file nor the multi-dimensional "
                         "notation", hint="e.g. 'Ring(4)_FC(2)_Switch(8)'")
    d = args.topology.count("(")
    lats = (args.latency or ",".join(["0.5us"] * d)).split(",")
    if len(lats) != d:
        raise UsageError(f"--latency needs {d} values, one per dimension")
    groups = ", ".join(f"100GB/s {lat.strip()}" for lat in lats)
    text = f'topology "{args.topology}"\ndims npu {args.topology} {groups}\n'
    return parse(text, "<--topology>").topology, ()


def cmd_allocate(argv: Sequence[str]) -> int:
    """``tacosc allocate`` (under its ``--limit`` options)."""
    return _run(argv, _allocate_parser, _allocate)


def _allocate(args: argparse.Namespace) -> int:
    import numpy as np

    from tacos.cost.allocate import GB, Op, allocate, parse_op, workload_terms
    from tacos.cost.confirm import confirm, seed_prices
    from tacos.model.units import parse_quantity

    if args.plot:  # fail now, not after the confirming syntheses
        from tacos.backends.plot import check_plot_path

        check_plot_path(args.plot)
    topo, declared = _allocation_topology(args)
    try:
        budget = parse_quantity(args.budget, "bandwidth", default_unit="GB/s")
        minimum = parse_quantity(args.minimum, "bandwidth", default_unit="GB/s")
        step = parse_quantity(args.grid_step, "bandwidth", default_unit="GB/s")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ops = [parse_op(o) for o in args.op]
    if not ops:
        for c in declared:
            n = len(topo.live_npus)
            if len(c.group) != n:
                raise UsageError("declared collectives must span every NPU here",
                                 hint="describe process groups with --op KIND:SIZE:inner=K")
            ops.append(Op(c.kind, c.size))
    if not ops:
        raise UsageError("no workload", hint="add --op allreduce:64MiB (repeatable)")
    terms = workload_terms(topo, ops, model=args.model, pipelined=args.pipelined)
    prices = None
    if args.prices:
        try:
            prices = (seed_prices(topo) if args.prices == "seed" else
                      [float(x) for x in args.prices.split(",")])
        except ValueError:
            raise UsageError("--prices takes numbers separated by commas, or 'seed'") from None
    alloc = allocate(terms, budget, minimum=minimum, prices=prices, grid_step=step or None)
    splits = {"optimum": alloc.bandwidth}
    if alloc.grid_best is not None:
        splits["grid best"] = alloc.grid_best
    for name, (b, _) in alloc.references.items():
        splits[name] = np.maximum(b, minimum)
    chosen = dict(list(splits.items())[:max(0, args.confirm)])
    confirmed = []
    if chosen:
        confirmed = confirm(topo, ops, chosen, model=args.model,
                            solver=None if args.no_synthesize else args.solver, seed=args.seed,
                            dims=terms.dims)
    if args.plot:
        from tacos.cost.plots import plot_allocation

        plot_allocation(alloc, terms, args.plot, prices=prices, confirmed=confirmed,
                        title=f"{topo.name or args.topology}: "
                        + "; ".join(o.label() for o in ops))
    values = {name: float(terms.time(b)[0]) for name, b in splits.items()}
    if args.json:
        from tacos.report import json_safe
        from tacos.report_schema import envelope

        print(json.dumps(envelope("allocate", json_safe({
            "dims": list(alloc.dims), "budget": budget, "bandwidth": list(alloc.bandwidth),
            "time": alloc.time, "cost": alloc.cost, "objective": alloc.objective,
            "method": alloc.method, "search_seconds": alloc.search_seconds,
            "grid": {"step": alloc.grid_step, "points": alloc.grid_points,
                     "best": None if alloc.grid_best is None else list(alloc.grid_best),
                     "value": alloc.grid_time},
            "splits": {k: {"bandwidth": list(v), "model": values[k]} for k, v in splits.items()},
            "confirmed": confirmed, "synthesized_best": fastest_synthesized(confirmed)}), True),
            indent=2))
        return 0
    dims = ", ".join(f"d{k}" for k in alloc.dims)
    print(f"workload: {'; '.join(o.label() for o in ops)} "
          f"({'pipelined' if args.pipelined else 'stage by stage'}, {args.model} model)")
    print(f"budget {budget / GB:g} GB/s per NPU over ({dims}); objective {alloc.objective}")
    print(f"method: {alloc.method}; search {alloc.search_seconds * 1e3:.1f} ms")
    if alloc.grid_best is not None:
        print(f"grid check: {alloc.grid_points} splits at {alloc.grid_step / GB:g} GB/s steps, "
              f"best {'/'.join(f'{x / GB:g}' for x in alloc.grid_best)} GB/s")
    sim = {row["name"]: row for row in confirmed}
    rows = []
    for name, b in splits.items():
        row = sim.get(name, {})
        rows.append([name, "/".join(f"{x / GB:.1f}" for x in b), _t(values[name]),
                     _t(row.get("baseline")), _t(row.get("synthesized"))])
    print(_table(["split", f"GB/s ({dims})", "model", "baseline (sim)",
                  f"{args.solver} (sim)"], rows))
    print(disagreement(confirmed, args.model, args.solver))
    if alloc.cost is not None:
        print(f"cost of the optimum: ${alloc.cost:,.2f} per NPU")
    return 0


def fastest_synthesized(confirmed: list[dict]) -> str | None:
    """The split whose synthesized plans were fastest in the confirmation (None: none ran)."""
    timed = [r for r in confirmed if r.get("synthesized") is not None]
    return min(timed, key=lambda r: r["synthesized"])["name"] if timed else None


def disagreement(confirmed: list[dict], model: str, solver: str) -> str:
    """One line: what "optimum" optimizes, and whether the synthesized plans agree."""
    head = f"optimum: of the {model} model's time (the 'model' column)"
    best = fastest_synthesized(confirmed)
    rows = {r["name"]: r for r in confirmed}
    if best is None:
        return head + "; no synthesis confirmed it"
    if best == "optimum":
        return head + f"; the {solver} plans agree: it is also their fastest split"
    opt = rows.get("optimum", {}).get("synthesized")
    return (head + f"; the {solver} plans DISAGREE: '{best}' is their fastest split ("
            + _t(rows[best]["synthesized"])
            + (f" against {_t(opt)} for the optimum)" if opt is not None else ")"))
