"""``nvidia-smi topo -m`` output → TDL.

The matrix names, for every pair of GPUs (and NICs), how they connect: ``X`` (self), ``NV#``
(a bonded set of # NVLinks), ``PIX``/``PXB`` (PCIe switch(es)), ``PHB`` (host bridge),
``NODE`` (within a NUMA node), ``SYS`` (across NUMA nodes).  The importer keeps the NVLink part:

* when every pair of GPUs shows the same ``NV#`` (an NVSwitch system such as DGX-A100/H100),
  the GPUs hang off one switch ``nvswitch`` with a port of # links;
* otherwise each ``NV#`` pair is a two-way link of multiplicity # (DGX-1-like cube meshes);
* GPUs that NVLink does not join into one group share a PCIe host switch ``pcie``.

Per-link NVLink bandwidth (``nvlink``, default 25 GB/s per direction, NVLink 2/3) and latency
(``nvlink_alpha``, default 0.7 us) are options, since the matrix carries no speeds.  Each NIC
is placed at its closest GPU (PIX before PXB, PHB, NODE, SYS; GPUs without a NIC first);
with ``nodes`` > 1 the copies are joined through their NICs (see
:func:`tacos.frontends.import_util.fabric_lines`).  Escape codes, tabs and both the ``NIC0``
and older ``mlx5_0`` column names are accepted; every mistake is reported at its line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tacos.frontends.import_util import (
    bw,
    error_at,
    fabric_lines,
    lat,
    quantity,
    read_text,
    tdl_name,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RELATIONS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
CLOSENESS = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SOC": 4, "SYS": 4}
STOP_WORDS = ("CPU", "NUMA", "GPU NUMA")


@dataclass
class SmiMatrix:
    """The parsed matrix: device names in column order and relation text per pair."""

    columns: list[str]
    rows: dict[str, list[str]] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        """GPU names in order."""
        return [c for c in self.columns if c.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        """NIC names in order."""
        return [c for c in self.columns if not c.startswith("GPU")]

    def rel(self, a: str, b: str) -> str:
        """Relation text between devices ``a`` and ``b``."""
        return self.rows[a][self.columns.index(b)]


def parse_matrix(text: str, name: str = "<nvidia-smi topo -m>") -> SmiMatrix:
    """Parse the matrix (raises a located :class:`~tacos.errors.TacosError` on bad input)."""
    lines = [ANSI.sub("", ln).expandtabs(8).rstrip() for ln in text.splitlines()]
    head = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    if head is None:
        raise error_at(name, text, 1, 1, "no matrix header (a line starting with GPU0) found",
                       hint="paste the output of  nvidia-smi topo -m")
    words = lines[head].split()
    columns = []
    for w in words:
        if w in ("CPU", "NUMA", "Affinity", "GPU") or w.startswith(STOP_WORDS):
            break
        if w in columns:
            raise error_at(name, text, head + 1, _col_of(lines[head], w, 0),
                           f"column {w} appears twice in the header", width=len(w))
        columns.append(w)
    matrix = SmiMatrix(columns)
    for i in range(head + 1, len(lines)):
        ln = lines[i]
        if not ln.strip():
            if matrix.rows:
                break
            continue
        if ln.lstrip().startswith("Legend"):
            break
        cells = ln.split()
        dev = cells[0]
        if dev in matrix.rows:
            raise error_at(name, text, i + 1, 1, f"a second row for {dev}", width=len(dev))
        if dev not in columns:
            raise error_at(name, text, i + 1, 1, f"row {dev!r} is not one of the columns "
                           f"({', '.join(columns)})", width=len(dev))
        values = cells[1:1 + len(columns)]
        if len(values) < len(columns):
            raise error_at(name, text, i + 1, len(ln) + 1, f"row {dev} has {len(values)} "
                           f"entries for {len(columns)} columns")
        for j, v in enumerate(values):
            if v not in RELATIONS and not re.fullmatch(r"NV\d+", v):
                col = _col_of(text.splitlines()[i], v, j)
                raise error_at(name, text, i + 1, col, f"{v!r} is not a connection type",
                               hint="expected X, NV#, PIX, PXB, PHB, NODE or SYS",
                               width=len(v))
            if (v == "X") != (columns[j] == dev):
                col = _col_of(text.splitlines()[i], v, j)
                raise error_at(name, text, i + 1, col, f"{dev} -> {columns[j]} is {v!r}; "
                               "X marks exactly the device itself", width=len(v))
        matrix.rows[dev] = values
    missing = [c for c in columns if c not in matrix.rows]
    if missing:
        raise error_at(name, text, head + 1, 1, f"no row for {', '.join(missing)}")
    if not matrix.gpus:
        raise error_at(name, text, head + 1, 1, "the matrix has no GPU")
    for a in matrix.gpus:
        for b in matrix.gpus:
            if matrix.rel(a, b) != matrix.rel(b, a):
                raise error_at(name, text, head + 1, 1, f"{a} -> {b} is {matrix.rel(a, b)} "
                               f"but {b} -> {a} is {matrix.rel(b, a)}; the matrix is not "
                               "symmetric")
    return matrix


def _col_of(line: str, value: str, index: int) -> int:
    clean = ANSI.sub("", line).expandtabs(8)
    pos = -1
    for _ in range(index + 2):
        pos = clean.find(value, pos + 1)
    return max(1, pos + 1)


def nvlink_counts(m: SmiMatrix) -> list[list[int]]:
    """NVLinks between GPU i and GPU j (0 when they are not NVLink-joined)."""
    g = m.gpus
    return [[int(m.rel(a, b)[2:]) if m.rel(a, b).startswith("NV") else 0 for b in g]
            for a in g]


def nic_gpus(m: SmiMatrix) -> list[int]:
    """For each NIC, the index of the GPU it is placed at (closest first, each GPU at most
    once while GPUs without a NIC remain)."""
    taken: dict[int, int] = {}
    out = []
    for nic in m.nics:
        ranked = sorted(range(len(m.gpus)),
                        key=lambda i: (CLOSENESS.get(m.rel(nic, m.gpus[i]), 9),
                                       taken.get(i, 0), i))
        best = ranked[0]
        taken[best] = taken.get(best, 0) + 1
        out.append(best)
    return out


def node_lines(counts: list[list[int]], nvlink: float, alpha: float, ref: str,
               pcie: float, pcie_alpha: float) -> list[str]:
    """TDL links of one node's GPUs (``ref`` formats GPU ``{g}``)."""
    n = len(counts)
    pairs = {counts[i][j] for i in range(n) for j in range(n) if i != j}
    out: list[str] = []
    if n > 1 and len(pairs) == 1 and 0 not in pairs:
        k = pairs.pop()
        ends = ", ".join(ref.format(g=g) for g in range(n))
        out.append(f"switch nvswitch attach {ends} {bw(k * nvlink)} {lat(alpha)} tag nvlink")
        return out
    for i in range(n):
        for j in range(i + 1, n):
            if counts[i][j]:
                mult = f" x{counts[i][j]}" if counts[i][j] > 1 else ""
                out.append(f"link {ref.format(g=i)} <-> {ref.format(g=j)} {bw(nvlink)} "
                           f"{lat(alpha)}{mult} tag nvlink")
    if n > 1 and not _connected(counts):
        ends = ", ".join(ref.format(g=g) for g in range(n))
        out.append(f"switch pcie attach {ends} {bw(pcie)} {lat(pcie_alpha)} tag pcie")
    return out


def _connected(counts: list[list[int]]) -> bool:
    seen, todo = {0}, [0]
    while todo:
        v = todo.pop()
        for w, c in enumerate(counts[v]):
            if c and w not in seen:
                seen.add(w)
                todo.append(w)
    return len(seen) == len(counts)


def to_tdl(source: str | Path, *, nodes: int = 1, nvlink: Any = "25GB/s",
           nvlink_alpha: Any = "0.7us", nic: Any = None, nic_alpha: Any = "2us",
           pcie: Any = "25GB/s", pcie_alpha: Any = "1us", name: str = "") -> str:
    """TDL text for the system the matrix describes (see the module docstring)."""
    text, src = read_text(source, "nvidia-smi topo -m output")
    m = parse_matrix(text, src)
    counts = nvlink_counts(m)
    nvl = quantity(nvlink, "bandwidth", "nvlink", "GB/s")
    nva = quantity(nvlink_alpha, "time", "nvlink_alpha", "us")
    pc, pca = quantity(pcie, "bandwidth", "pcie", "GB/s"), quantity(pcie_alpha, "time",
                                                                   "pcie_alpha", "us")
    n_gpus = len(counts)
    lines = [f"# imported from {src} (nvidia-smi topo -m): {n_gpus} GPUs, "
             f"{len(m.nics)} NICs; NVLink {bw(nvl)} per link",
             f"topology {tdl_name(name or 'nvidia-smi ' + Path(src).stem)}"]
    if nodes <= 1:
        lines.append(f"npu gpu[{n_gpus}]")
        lines += node_lines(counts, nvl, nva, "gpu[{g}]", pc, pca)
        return "\n".join(lines) + "\n"
    nic_bw = _need_nic(nic, m.nics)
    lines.append(f"npu gpu[{n_gpus}, {nodes}]   # gpu[g, n]: GPU g of node n")
    for n in range(nodes):
        lines += [ln.replace("switch nvswitch", f"switch nvswitch{n}")
                  .replace("switch pcie", f"switch pcie{n}")
                  for ln in node_lines(counts, nvl, nva, "gpu[{g}, " + str(n) + "]", pc, pca)]
    lines += fabric_lines(nodes, nic_gpus(m), "gpu[{g}, {n}]", nic_bw,
                          quantity(nic_alpha, "time", "nic_alpha", "us"))
    return "\n".join(lines) + "\n"


def _need_nic(nic: Any, nics: list[str]) -> float:
    from tacos.errors import TacosError

    if not nics:
        raise TacosError("nodes > 1 needs NICs, and the matrix lists none")
    if nic is None:
        raise TacosError("nodes > 1: give the NIC bandwidth (the matrix carries no speeds)",
                         hint="e.g. nic='25GB/s' for HDR 200 Gb/s InfiniBand")
    return quantity(nic, "bandwidth", "nic", "GB/s")
