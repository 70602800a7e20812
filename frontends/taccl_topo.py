"""TACCL topology profiles (the ``--topology-file`` JSON of microsoft/taccl) → TDL.

A profile gives, for one node, ``gpus_per_node``, ``alpha`` (µs), link costs β (µs for the
input size the profile was made for) and, for several nodes, ``nics_per_node``,
``remote_alpha`` and ``remote_beta``.  The link layout depends on TACCL's topology kind, which
TACCL takes on its command line, not from the file:

* ``ndv2``: the DGX-1 cube mesh; ``node_betas_list = [β of doubled links, β of single links]``;
* ``dgx2`` and ``hubandspoke``: every GPU on one switch, port cost ``node_betas_list[0]``;
* ``custom``: ``links[dst][src]`` (link counts) and ``betas[dst][src]`` matrices.

``kind`` defaults to ``custom`` when the file has ``links``, else to the kind its ``name``
starts with (``NDv2_1MB`` → ndv2).  Bandwidth = ``size`` / β, where ``size`` is the profiled
input size: the ``size`` option, else the size that ends the name (``NDv2_1MB`` → 1 MB).
With ``nodes`` > 1 the copies are joined through NICs of ``size`` / ``remote_beta``: at GPU 0
(ndv2), at the odd GPUs (dgx2, TACCL's relay sketch), or at ``nic_gpus`` (other kinds).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tacos.frontends.import_util import (
    bw,
    error_at,
    fabric_lines,
    lat,
    load_json,
    locate,
    read_text,
    tdl_name,
)
from tacos.frontends.teccl_topo import DGX1_LINKS

from tacos.errors import TacosError
from tacos.model.units import parse_size

KINDS = ("ndv2", "dgx2", "hubandspoke", "custom")


def _field(doc: dict, key: str, text: str, src: str, kind: type | tuple = (int, float)) -> Any:
    if key not in doc:
        raise error_at(src, text, 1, 1, f"the profile has no {key!r}",
                       hint="see TACCL's INPUT_GUIDE.md for the fields of a topology file")
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        line, col = locate(text, f'"{key}"')
        raise error_at(src, text, line, col, f"{key} = {value!r} has the wrong type",
                       width=len(key) + 2)
    return value


def _size_of(doc: dict, size: Any, text: str, src: str) -> float:
    if size is not None:
        return float(parse_size(size, "size"))
    m = re.search(r"(\d+(?:\.\d+)?\s*[KMGT]i?B)$", str(doc.get("name", "")))
    if not m:
        line, col = locate(text, '"name"')
        raise error_at(src, text, line, col, "the profile does not say for which input size its "
                       "betas were measured", hint="pass size='1MB' (the size TACCL was given)")
    return float(parse_size(m.group(1).replace(" ", "")))


def to_tdl(source: str | Path, *, kind: str | None = None, size: Any = None, nodes: int = 1,
           nic_gpus: list[int] | None = None, name: str = "") -> str:
    """TDL text for ``nodes`` copies of the profiled node (see the module docstring)."""
    text, src = read_text(source, "TACCL topology profile")
    doc = load_json(text, src)
    if not isinstance(doc, dict):
        raise error_at(src, text, 1, 1, "a TACCL profile is a JSON object")
    n = _field(doc, "gpus_per_node", text, src, int)
    if n < 1:
        raise error_at(src, text, *locate(text, '"gpus_per_node"'), "gpus_per_node must be >= 1")
    alpha = _field(doc, "alpha", text, src) * 1e-6
    nbytes = _size_of(doc, size, text, src)
    if kind is None:
        low = str(doc.get("name", "")).lower()
        kind = "custom" if "links" in doc else next((k for k in KINDS if low.startswith(k)), None)
        if kind is None:
            raise TacosError(f"{src}: cannot tell TACCL's topology kind from the file",
                             hint=f"pass kind= one of {', '.join(KINDS)}")
    if kind not in KINDS:
        raise TacosError(f"unknown TACCL topology kind {kind!r}", hint=f"use one of {KINDS}")
    body = [f"npu gpu[{n}, {max(1, nodes)}]   # gpu[g, n]: GPU g of node n"]
    for c in range(max(1, nodes)):
        body += _node(kind, doc, n, c, nbytes, alpha, text, src)
    if nodes > 1:
        places = nic_gpus or {"ndv2": [0], "dgx2": list(range(1, n, 2))}.get(kind)
        if not places:
            raise TacosError(f"nodes > 1 with kind {kind!r}: say which GPUs hold the NICs",
                             hint="pass nic_gpus=[0, ...]")
        r_beta = _field(doc, "remote_beta", text, src) * 1e-6
        r_alpha = _field(doc, "remote_alpha", text, src) * 1e-6
        body += fabric_lines(nodes, places, "gpu[{g}, {n}]", nbytes / r_beta, r_alpha)
    head = [f"# imported from {src} (TACCL {kind} profile for {int(nbytes)} B inputs)",
            f"topology {tdl_name(name or str(doc.get('name') or 'TACCL ' + kind))}"]
    return "\n".join(head + body) + "\n"


def _node(kind: str, doc: dict, n: int, c: int, nbytes: float, alpha: float, text: str,
          src: str) -> list[str]:
    ref = "gpu[{g}, " + str(c) + "]"
    if kind in ("dgx2", "hubandspoke"):
        betas = _field(doc, "node_betas_list", text, src, list)
        port = nbytes / (float(betas[0]) * 1e-6)
        ends = ", ".join(ref.format(g=g) for g in range(n))
        return [f"switch nvswitch{c} attach {ends} {bw(port)} {lat(alpha)} tag nvlink"]
    if kind == "ndv2":
        betas = _field(doc, "node_betas_list", text, src, list)
        if n != 8 or len(betas) != 2:
            raise error_at(src, text, *locate(text, '"node_betas_list"'),
                           "an ndv2 profile has 8 GPUs and two betas (doubled, single links)")
        rate = {2: nbytes / (float(betas[0]) * 1e-6), 1: nbytes / (float(betas[1]) * 1e-6)}
        return [f"link {ref.format(g=a)} <-> {ref.format(g=b)} {bw(rate[m])} {lat(alpha)} "
                "tag nvlink" for a, b, m in DGX1_LINKS]
    links = _field(doc, "links", text, src, list)
    betas = _field(doc, "betas", text, src, list)
    out = []
    for dst in range(n):
        for s in range(n):
            try:
                count, beta = int(links[dst][s]), float(betas[dst][s])
            except (IndexError, TypeError, ValueError):
                raise error_at(src, text, *locate(text, '"links"'),
                               f"links/betas must be {n}x{n} matrices of numbers") from None
            if count <= 0 or s == dst:
                continue
            if beta <= 0:
                raise error_at(src, text, *locate(text, '"betas"'),
                               f"betas[{dst}][{s}] = {beta} for a link: must be > 0")
            mult = f" x{count}" if count > 1 else ""
            out.append(f"link {ref.format(g=s)} -> {ref.format(g=dst)} "
                       f"{bw(nbytes / (beta * 1e-6))} {lat(alpha)}{mult} tag nvlink")
    return out
