"""The TDL frontend: text or file → :class:`tacos.spec.Spec`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tacos.frontends.tdl_builder import State, evaluate
from tacos.frontends.tdl_jobs import build_job
from tacos.frontends.tdl_parser import read_source
from tacos.frontends.tdl_reshard import build_reshard

from tacos import limits
from tacos.errors import InfeasibleError, Span, TacosError, TdlSemanticError
from tacos.model import patterns
from tacos.model.collective import Collective
from tacos.model.topology import Link, Npu, Switch, Topology
from tacos.passes.feasibility import check_feasible
from tacos.spec import Spec

DEFAULT_COLLECTIVE_SIZE = patterns.DEFAULT_SIZE


def parse_tdl(text: str, source: str = "<string>", params: dict[str, Any] | None = None,
              include_dirs: Iterable[str | Path] | None = None) -> Spec:
    """Parse TDL text into a Spec (raises :class:`tacos.errors.TacosError` on bad input).

    ``include_dirs``: further folders ``use "path"`` may read from.
    """
    return build_spec(evaluate(text, source, params, include_dirs), source)


def load_tdl(path: str | Path, params: dict[str, Any] | None = None,
             include_dirs: Iterable[str | Path] | None = None) -> Spec:
    """Read and parse a TDL file."""
    return parse_tdl(read_source(path), str(path), params, include_dirs)


def _error(state: State, message: str, span: Any, hint: str | None = None) -> TdlSemanticError:
    line = None
    if span is not None and span.file in state.texts:
        lines = state.texts[span.file].splitlines()
        line = lines[span.line - 1] if span.line <= len(lines) else None
    return TdlSemanticError(message, span=span, hint=hint, source_line=line)


def build_spec(state: State, source: str) -> Spec:
    """Number the nodes (NPUs first, then switches) and build the IR."""
    n = len(state.npus)
    if n == 0:
        text = state.texts.get(source, "")
        lines = text.splitlines() or [""]
        raise TdlSemanticError("the file declares no NPU",
                               span=Span(source, len(lines), len(lines[-1]) + 1),
                               source_line=lines[-1],
                               hint="declare some, e.g.  npu gpu[8]  or  ring r[8] 50GB/s 1us")

    def node_id(key: int) -> int:
        return key if key >= 0 else n + (-key - 1)

    npus = tuple(Npu(i, name, i in state.failed_npus, span)
                 for i, (name, span) in enumerate(state.npus))
    switches = tuple(Switch(n + j, name, policy, degree, span, caps)
                     for j, (name, span, policy, degree, caps) in enumerate(state.switches))
    links, failed = [], []
    for (s, d), decl in state.links.items():
        p = decl.props
        link = Link(node_id(s), node_id(d), float(p.latency or 0.0), float(p.bandwidth),
                    p.multiplicity, p.dim, p.tag, None, decl.span)
        if (s, d) in state.failed_links or s in state.failed_npus or d in state.failed_npus:
            failed.append(link)
        else:
            links.append(link)
    topology = Topology(npus, switches, tuple(links), state.name, tuple(failed),
                        hardware=state.hardware)
    collectives = tuple(_collective(state, decl, topology, i)
                        for i, decl in enumerate(state.collectives))
    for decl, coll in zip(state.collectives, collectives, strict=True):
        try:
            check_feasible(topology, coll)
        except InfeasibleError as exc:
            raise _error(state, f"{coll.name}: {exc.message}", decl.span, exc.hint) from None
    failed = set(state.failed_npus)

    def error(message: str, span: Any, hint: str | None) -> TdlSemanticError:
        return _error(state, message, span, hint)

    def label(key: int) -> str:
        return state.npus[key][0] if key >= 0 else state.switches[-key - 1][0]

    reshards = tuple(build_reshard(d, failed, label, node_id, error) for d in state.reshards)
    jobs = []
    for decl in state.jobs:
        colls = [_collective(state, c, topology, i) for i, c in enumerate(decl.collectives)]
        for c, cd in zip(colls, decl.collectives, strict=True):
            try:
                check_feasible(topology, c)
            except InfeasibleError as exc:
                raise _error(state, f"job {decl.name!r}, {c.name}: {exc.message}", cd.span,
                             exc.hint) from None
        jobs.append(build_job(decl, colls, node_id))
    return Spec(topology, collectives, source, dict(state.params), reshards, tuple(jobs))


def _collective(state: State, decl: Any, topology: Topology, index: int) -> Collective:
    failed = set(state.failed_npus)

    def check_alive(keys: list[int], what: str) -> None:
        for k in keys:
            if k in failed:
                raise _error(state, f"{state.npus[k][0]} has failed; it cannot be {what}",
                             decl.span, "remove it from the collective or remove the failure")

    if decl.kind == "custom":
        chunks = []
        for pre, post, reduce, size, _span in decl.custom:
            check_alive(pre + post, "part of a chunk's pre- or postcondition")
            chunks.append((pre, post, reduce, size))
        return patterns.custom(chunks, name=decl.name or f"custom{index}")
    if decl.kind not in patterns.STANDARD_COLLECTIVES:
        close = difflib.get_close_matches(decl.kind, patterns.STANDARD_COLLECTIVES, n=1)
        raise _error(state, f"unknown collective {decl.kind!r}", decl.span,
                     f"did you mean '{close[0]}'?" if close
                     else f"use one of {', '.join(patterns.STANDARD_COLLECTIVES)} or custom")
    group = decl.group if decl.group is not None else list(topology.live_npus)
    check_alive(group, "in the group")
    if decl.kind in patterns.ROOTED_COLLECTIVES:
        if decl.root is None:
            raise _error(state, f"{decl.kind} needs a root", decl.span,
                         f"add  root NPU, e.g.  collective {decl.kind} root 0")
        check_alive([decl.root], "the root")
        if decl.root not in group:
            raise _error(state, f"root {state.npus[decl.root][0]} is not in the group",
                         decl.span)
    elif decl.root is not None:
        raise _error(state, f"{decl.kind} takes no root", decl.span)
    if len(group) < 2 and decl.kind != "custom":
        raise _error(state, f"{decl.kind} needs at least 2 NPUs in its group", decl.span)
    try:
        limits.check_deliveries_of(decl.kind, len(group), decl.chunks)
    except limits.LimitError as exc:
        located = _error(state, exc.message, decl.span, exc.hint)
        raise limits.LimitError(located.message, span=located.span, hint=located.hint,
                                source_line=located.source_line) from None
    size = decl.size
    if size is None:  # the default, not the user's: fitted to whole chunks
        size = patterns.default_size(decl.kind, len(group), decl.chunks)
    try:
        coll = patterns.build(decl.kind, group, size=size, chunks_per_npu=decl.chunks,
                              root=decl.root, name=decl.name or decl.kind)
    except TacosError as exc:
        raise _error(state, exc.message, decl.size_span or decl.span, exc.hint) from None
    return replace(coll, span=decl.span)
