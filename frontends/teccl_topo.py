"""TE-CCL topology input (the ``TopologyParams`` of a TE-CCL input JSON) → TDL.

TE-CCL (microsoft/TE-CCL) names its topology in the input file and defines it in code
(``teccl/topologies/*.py``); this importer rebuilds the same graph.  Fields read:
``TopologyParams.name`` (``DGX1``, ``NDv2``, ``DGX2``, ``AMD``, ``Mesh``), ``chassis``,
``alpha`` (``[link alpha, switch alpha]`` in seconds; used by DGX1, AMD and Mesh) and
``side_length`` (Mesh).  ``chunk_size`` only scales TE-CCL's capacities (chunks per second) and
does not change the bandwidths, which TE-CCL fixes in GB/s:

* DGX1: the DGX-1 cube mesh, 25 GB/s per NVLink (doubled pairs: two links), one node;
* NDv2: DGX-1 NVLinks at 25 GB/s and 0.7 us; IB 12.5 GB/s and 1.3 us, one-way: with 2
  chassis GPU 0 of each node sends to GPU 1 of the other; otherwise GPU 0 of every node sends
  into switch ``ib`` and it to GPU 1 of every node (also for 1 chassis, as TE-CCL does);
* DGX2: 2 chassis (TE-CCL fixes it) of 16 GPUs on an NVSwitch, 125 GB/s and 0.35 us per port;
  odd GPU s of one chassis sends to GPU s-1 of the other at 12.5 GB/s, 2.6 us;
* AMD: 16 GCDs with xGMI bundles of 50 GB/s links; with several chassis a switch per GCD pair
  and one switch joining them (25 GB/s; TE-CCL's rule gives the links of the first pair switch
  the GCD rate, kept here);
* Mesh: side x side nodes, 100 GB/s; as in TE-CCL node i links to i±1 and i±side (so row ends
  connect to the next row's start).
"""

from __future__ import annotations

from pathlib import Path

from tacos.frontends.import_util import bw, error_at, lat, load_json, locate, read_text, tdl_name

DGX1_LINKS = ((0, 1, 2), (0, 2, 1), (0, 3, 1), (0, 4, 2), (1, 2, 1), (1, 3, 2), (1, 5, 1),
              (2, 3, 2), (2, 6, 2), (3, 7, 1), (4, 5, 2), (4, 6, 1), (4, 7, 1), (5, 6, 1),
              (5, 7, 2), (6, 7, 2))
"""(GPU, GPU, NVLinks) of a DGX-1 in TE-CCL's (and TACCL's) numbering."""

AMD_LINKS = ((0, 1, 4), (0, 4, 2), (0, 8, 1), (1, 5, 1), (1, 9, 1), (1, 10, 1), (2, 3, 4),
             (2, 6, 1), (2, 10, 1), (2, 9, 1), (3, 7, 2), (3, 11, 1), (4, 6, 1), (4, 5, 4),
             (5, 7, 1), (5, 6, 1), (6, 7, 4), (8, 9, 4), (8, 12, 2), (9, 13, 1), (10, 11, 4),
             (10, 14, 1), (11, 15, 2), (12, 13, 4), (12, 14, 1), (13, 15, 1), (13, 14, 1),
             (14, 15, 4))
"""(GCD, GCD, xGMI links) of TE-CCL's 16-GCD AMD node."""

NAMES = ("DGX1", "NDv2", "DGX2", "AMD", "Mesh")


def to_tdl(source: str | Path, *, name: str = "") -> str:
    """TDL text for the topology a TE-CCL input file names (see the module docstring)."""
    text, src = read_text(source, "TE-CCL input JSON")
    doc = load_json(text, src)
    params = doc.get("TopologyParams") if isinstance(doc, dict) else None
    if not isinstance(params, dict):
        raise error_at(src, text, 1, 1, "no \"TopologyParams\" object: not a TE-CCL input file",
                       hint="TE-CCL inputs have TopologyParams, GurobiParams, InstanceParams")
    topo = params.get("name", "DGX1")
    if topo not in NAMES:
        line, col = locate(text, f'"{topo}"')
        raise error_at(src, text, line, col, f"TE-CCL topology {topo!r} is not one of "
                       f"{', '.join(NAMES)}", width=len(str(topo)) + 2)
    chassis = params.get("chassis", 1)
    if isinstance(chassis, bool) or not isinstance(chassis, int) or chassis < 1:
        line, col = locate(text, '"chassis"')
        raise error_at(src, text, line, col, f"chassis must be an integer >= 1, not {chassis!r}")
    alpha = params.get("alpha", [0.0, 0.0])
    if not (isinstance(alpha, list) and len(alpha) >= 1
            and all(isinstance(a, int | float) and a >= 0 for a in alpha)):
        line, col = locate(text, '"alpha"')
        raise error_at(src, text, line, col, f"alpha must be a list [link, switch] of seconds, "
                       f"not {alpha!r}")
    a_link, a_switch = float(alpha[0]), float(alpha[1] if len(alpha) > 1 else alpha[0])
    head = [f"# imported from {src} (TE-CCL {topo}, chassis={chassis})",
            f"topology {tdl_name(name or f'TE-CCL {topo}')}"]
    body = _BUILD[topo](params, chassis, a_link, a_switch, text, src)
    return "\n".join(head + body) + "\n"


def _dgx1_links(prefix: str, alpha: float) -> list[str]:
    return [f"link {prefix}[{a}] <-> {prefix}[{b}] {bw(25e9)} {lat(alpha)}"
            + (f" x{m}" if m > 1 else "") + " tag nvlink" for a, b, m in DGX1_LINKS]


def _dgx1(params: dict, chassis: int, a: float, _s: float, _t: str, _src: str) -> list[str]:
    return ["npu gpu[8]"] + _dgx1_links("gpu", a)


def _ndv2(params: dict, chassis: int, _a: float, _s: float, _t: str, _src: str) -> list[str]:
    out = []
    for c in range(chassis):
        out.append(f"npu n{c}[8]")
        out += _dgx1_links(f"n{c}", 0.7e-6)
    ib = f"{bw(12.5e9)} {lat(1.3e-6)} tag ib"
    if chassis == 2:
        out += [f"link n0[0] -> n1[1] {ib}", f"link n1[0] -> n0[1] {ib}"]
    else:
        out.append("switch ib")
        for c in range(chassis):
            out += [f"link n{c}[0] -> ib {ib}", f"link ib -> n{c}[1] {ib}"]
    return out


def _dgx2(params: dict, chassis: int, _a: float, _s: float, _t: str, _src: str) -> list[str]:
    out = []
    for c in range(2):
        out += [f"npu n{c}[16]",
                f"switch nvswitch{c} attach n{c}[*] {bw(125e9)} {lat(0.35e-6)} tag nvlink"]
    for c in range(2):
        for s in range(1, 16, 2):
            out.append(f"link n{c}[{s}] -> n{1 - c}[{s - 1}] {bw(12.5e9)} {lat(2.6e-6)} tag ib")
    return out


def _amd(params: dict, chassis: int, a: float, s: float, _t: str, _src: str) -> list[str]:
    out = []
    for c in range(chassis):
        out.append(f"npu n{c}[16]")
        out += [f"link n{c}[{x}] <-> n{c}[{y}] {bw(50e9)} {lat(a)}" + (f" x{m}" if m > 1 else "")
                + " tag xgmi" for x, y, m in AMD_LINKS]
    if chassis == 1:
        return out
    out.append("switch main")
    for c in range(chassis):
        for p in range(8):
            rate, alpha = (50e9, a) if p == 0 else (25e9, s)
            out.append(f"switch n{c}_pair{p}")
            out += [f"link n{c}[{2 * p + q}] <-> n{c}_pair{p} {bw(rate)} {lat(alpha)} tag nic"
                    for q in (0, 1)]
            out.append(f"link n{c}_pair{p} <-> main {bw(25e9)} {lat(s)} tag nic")
    return out


def _mesh(params: dict, chassis: int, a: float, _s: float, text: str, src: str) -> list[str]:
    side = params.get("side_length", 4)
    if isinstance(side, bool) or not isinstance(side, int) or side < 2:
        line, col = locate(text, '"side_length"')
        raise error_at(src, text, line, col, f"side_length must be an integer >= 2, not {side!r}")
    n = side * side
    out = [f"npu m[{n}]"]
    for i in range(n):
        for j in (i + 1, i + side):
            if j < n:
                out.append(f"link m[{i}] <-> m[{j}] {bw(100e9)} {lat(a)}")
    return out


_BUILD = {"DGX1": _dgx1, "NDv2": _ndv2, "DGX2": _dgx2, "AMD": _amd, "Mesh": _mesh}

