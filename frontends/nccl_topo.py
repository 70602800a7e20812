"""NCCL topology XML (``NCCL_TOPO_FILE``, ``NCCL_TOPO_DUMP_FILE``) → TDL.

What the file gives: GPUs (PCI class ``0x03xxxx``) and NICs (``0x0207xx`` InfiniBand,
``0x0200xx`` Ethernet) in their PCIe tree under each CPU (NUMA node); NCCL's dumps add
``<nvlink target=... count=...>`` under each ``<gpu>`` and ``<net speed=...>`` (Mb/s) under
each ``<nic>``.  Files written for ``NCCL_TOPO_FILE`` (Azure's, for example) carry the PCIe and
NIC layout only: NCCL learns NVLink from the driver.  The NVLink part therefore comes from, in
this order:

1. ``node=PRESET``: a shipped node preset (``dgx1``, ``dgx_a100_node``, ``dgx_h100_node``,
   ``dgx2_node``, ...), whose GPU i is the file's i-th GPU (CUDA's PCI bus order, or the
   ``dev`` attribute of a dump);
2. ``nvlink_matrix=``: the output of ``nvidia-smi topo -m`` on the same machine
   (:mod:`tacos.frontends.nvidia_smi`);
3. the file's own ``<nvlink>`` elements (a dump).

Without any of them the import stops with a hint (the PCIe-only path is not modelled).  The
NICs are placed at their closest GPU (same PCIe switch before same CPU before another CPU);
with ``nodes`` > 1 the copies are joined through their NICs: one NIC per node → one IB switch,
several → rail-optimized rails (the ``ndv2`` and ``dgx_a100`` preset shapes).  NIC bandwidth
comes from ``<net speed>`` or the ``nic`` option; its latency from ``nic_alpha`` (default 2 us,
an assumption as in the presets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

from tacos.frontends.import_util import error_at, fabric_lines, quantity, read_text, tdl_name

from tacos.errors import TacosError

GPU_CLASS, NIC_CLASSES, NVSWITCH_CLASS = "0x03", ("0x0207", "0x0200"), "0x0680"
MAX_NVLINKS = 64
"""Most NVLinks one ``<nvlink count=...>`` may declare (an H100 has 18)."""


@dataclass
class Device:
    """A GPU or NIC: bus id, its PCIe ancestors (outermost first), line, and extras."""

    busid: str
    kind: str
    path: tuple[str, ...]
    line: int
    dev: int | None = None
    speed_mbps: float | None = None
    nvlinks: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class NcclTopo:
    """GPUs in CUDA order, NICs in bus order."""

    gpus: list[Device]
    nics: list[Device]
    nvswitches: set[str]


def parse_topo(text: str, name: str = "<NCCL topology>") -> NcclTopo:
    """Parse the XML (a located :class:`~tacos.errors.TacosError` on bad input)."""
    parser = expat.ParserCreate()
    stack: list[tuple[str, dict[str, str], int]] = []
    devices: list[Device] = []
    nvswitches: set[str] = set()
    seen_system = False
    bus_lines: dict[str, int] = {}  # GPU/NIC/NVSwitch bus id -> line of its <pci>: unique
    dev_lines: dict[int, int] = {}  # gpu dev -> line: CUDA indices are unique

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal seen_system
        line = parser.CurrentLineNumber
        if not stack and tag != "system":
            raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                           f"the root element is <{tag}>, not <system>",
                           hint="an NCCL topology file starts with <system version=\"1\">")
        seen_system = True
        stack.append((tag, attrs, line))
        if tag == "pci":
            cls = attrs.get("class", "")
            busid = attrs.get("busid", "").lower()
            if not busid:
                raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                               "<pci> without a busid")
            device = cls.startswith((GPU_CLASS, *NIC_CLASSES, NVSWITCH_CLASS))
            if device and busid in bus_lines:
                raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                               f"bus id {busid} appears twice (first on line "
                               f"{bus_lines[busid]})", hint="every PCI device has its own "
                               "bus id; the file was edited or merged from two machines")
            if device:
                bus_lines[busid] = line
            path = tuple(f"{t}:{a.get('numaid', a.get('busid', ''))}" for t, a, _l in stack[:-1]
                         if t in ("cpu", "pci"))
            if cls.startswith(GPU_CLASS):
                devices.append(Device(busid, "gpu", path, line))
            elif cls.startswith(NIC_CLASSES):
                devices.append(Device(busid, "nic", path, line))
            elif cls.startswith(NVSWITCH_CLASS):
                nvswitches.add(busid)
        elif tag == "gpu" and devices and stack[-2][0] == "pci":
            if "dev" in attrs:
                try:
                    devices[-1].dev = int(attrs["dev"])
                except ValueError:
                    raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                                   f"gpu dev={attrs['dev']!r} is not an integer") from None
                if devices[-1].dev in dev_lines:
                    raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                                   f"gpu dev={devices[-1].dev} appears twice (first on line "
                                   f"{dev_lines[devices[-1].dev]})",
                                   hint="every GPU has its own CUDA index")
                dev_lines[devices[-1].dev] = line
        elif tag == "nvlink" and devices:
            col = parser.CurrentColumnNumber + 1
            try:
                count = int(attrs.get("count", "1"))
            except ValueError:
                raise error_at(name, text, line, col,
                               f"nvlink count={attrs.get('count')!r} is not an integer") from None
            if not 1 <= count <= MAX_NVLINKS:
                raise error_at(name, text, line, col, f"nvlink count={count} is out of range "
                               f"(1 to {MAX_NVLINKS})")
            target = attrs.get("target", "").lower()
            if target == devices[-1].busid:
                raise error_at(name, text, line, col, f"an nvlink from GPU {target} to itself",
                               hint="an <nvlink> target is another GPU's (or an NVSwitch's) "
                               "bus id")
            devices[-1].nvlinks.append((target, count))
        elif tag == "net" and devices and "speed" in attrs:
            try:
                devices[-1].speed_mbps = float(attrs["speed"])
            except ValueError:
                raise error_at(name, text, line, parser.CurrentColumnNumber + 1,
                               f"net speed={attrs['speed']!r} is not a number") from None

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise error_at(name, text, exc.lineno, exc.offset + 1,
                       f"not well-formed XML: {expat.ErrorString(exc.code)}") from None
    if not seen_system:
        raise error_at(name, text, 1, 1, "no <system> element: not an NCCL topology file")
    gpus = [d for d in devices if d.kind == "gpu"]
    if not gpus:
        raise error_at(name, text, 1, 1, "the file lists no GPU (PCI class 0x03....)")
    if all(g.dev is not None for g in gpus):
        gpus.sort(key=lambda g: g.dev)  # type: ignore[arg-type, return-value]
    else:
        gpus.sort(key=lambda g: g.busid)
    nics = sorted((d for d in devices if d.kind == "nic"), key=lambda d: d.busid)
    return NcclTopo(gpus, nics, nvswitches)


def _distance(a: Device, b: Device) -> int:
    """0 same PCIe switch, 3 same CPU, 4 across CPUs (the nvidia-smi PIX/NODE/SYS scale)."""
    if a.path and b.path and a.path[-1] == b.path[-1] and a.path[-1].startswith("pci"):
        return 0
    if a.path and b.path and a.path[0] == b.path[0]:
        return 3
    return 4


def nic_gpus(topo: NcclTopo) -> list[int]:
    """For each NIC, the index of the GPU it is placed at."""
    taken: dict[int, int] = {}
    out = []
    for nic in topo.nics:
        best = min(range(len(topo.gpus)),
                   key=lambda i: (_distance(nic, topo.gpus[i]), taken.get(i, 0), i))
        taken[best] = taken.get(best, 0) + 1
        out.append(best)
    return out


def _preset_gpus(preset: str) -> int:
    from tacos.frontends.tdl import parse_tdl

    try:
        spec = parse_tdl(f"use {preset}\n", f"<preset {preset}>")
    except TacosError as exc:
        raise TacosError(f"node preset {preset!r}: {exc.message}", hint=exc.hint) from None
    return spec.topology.n_npus


def to_tdl(source: str | Path, *, node: str | None = None, nvlink_matrix: Any = None,
           nodes: int = 1, nic: Any = None, nic_alpha: Any = "2us", nvlink: Any = "25GB/s",
           nvlink_alpha: Any = "0.7us", name: str = "") -> str:
    """TDL text for ``nodes`` copies of the machine the file describes (module docstring)."""
    from tacos.frontends import nvidia_smi

    text, src = read_text(source, "NCCL topology XML")
    topo = parse_topo(text, src)
    n_gpus = len(topo.gpus)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TacosError(f"nodes must be an integer >= 1, not {nodes!r}")
    head = [f"# imported from {src} (NCCL topology): {n_gpus} GPUs, {len(topo.nics)} NICs "
            f"per node",
            f"topology {tdl_name(name or Path(src).stem)}"]
    if node is not None:
        have = _preset_gpus(node)
        if have != n_gpus:
            raise TacosError(f"node preset {node!r} has {have} NPUs but {src} lists {n_gpus} "
                             "GPUs", hint="choose the preset of this machine's node")
        body = [f"# NVLink part: preset {node} (its gpu[i] is the file's i-th GPU)",
                f"use {node} as node[{nodes}]"]
        ref = "node[{n}].gpu[{g}]"
    else:
        if nvlink_matrix is not None:
            m_text, m_src = read_text(nvlink_matrix, "nvidia-smi topo -m output")
            matrix = nvidia_smi.parse_matrix(m_text, m_src)
            counts = nvidia_smi.nvlink_counts(matrix)
            if len(counts) != n_gpus:
                raise TacosError(f"the nvidia-smi matrix lists {len(counts)} GPUs but {src} "
                                 f"lists {n_gpus}")
            origin = f"nvidia-smi matrix {m_src}"
        else:
            counts = _dump_counts(topo)
            if counts is None:
                line = topo.gpus[0].line
                row = text.splitlines()[line - 1]
                col = len(row) - len(row.lstrip()) + 1
                raise error_at(src, text, line, col, f"{src} carries no NVLink information (NCCL "
                               "learns NVLink from the driver)",
                               hint="give a node preset or an nvidia-smi topo -m matrix: "
                                    f"tacosc import nccl-topo {src} --node dgx_a100_node "
                                    "-o system.tdl (Python: node='dgx_a100_node' or "
                                    "nvlink_matrix='topo.txt')")
            origin = "the file's <nvlink> elements"
        nvl = quantity(nvlink, "bandwidth", "nvlink", "GB/s")
        nva = quantity(nvlink_alpha, "time", "nvlink_alpha", "us")
        body = [f"# NVLink part: {origin}", f"npu gpu[{n_gpus}, {nodes}]   # gpu[g, n]"]
        for n in range(nodes):
            body += [ln.replace("switch nvswitch", f"switch nvswitch{n}")
                     .replace("switch pcie", f"switch pcie{n}")
                     for ln in nvidia_smi.node_lines(counts, nvl, nva,
                                                     "gpu[{g}, " + str(n) + "]", 25e9, 1e-6)]
        ref = "gpu[{g}, {n}]"
    if nodes > 1:
        if not topo.nics:
            raise TacosError(f"nodes > 1 needs NICs, and {src} lists none")
        speeds = {d.speed_mbps for d in topo.nics}
        if nic is not None:
            nic_bw = quantity(nic, "bandwidth", "nic", "GB/s")
        elif None not in speeds and len(speeds) == 1:
            nic_bw = speeds.pop() * 1e6 / 8  # type: ignore[operator]
        else:
            raise TacosError(f"{src} gives no NIC speed: set the NIC bandwidth",
                             hint="e.g. nic='25GB/s' for HDR 200 Gb/s InfiniBand")
        body += fabric_lines(nodes, nic_gpus(topo), ref, nic_bw,
                             quantity(nic_alpha, "time", "nic_alpha", "us"))
    return "\n".join(head + body) + "\n"


def _dump_counts(topo: NcclTopo) -> list[list[int]] | None:
    """NVLink counts from a dump's ``<nvlink>`` elements (NVSwitch targets: every GPU pair
    gets the port's count, which :func:`nvidia_smi.node_lines` turns into a switch)."""
    if not any(g.nvlinks for g in topo.gpus):
        return None
    index = {g.busid: i for i, g in enumerate(topo.gpus)}
    n = len(topo.gpus)
    counts = [[0] * n for _ in range(n)]
    for i, g in enumerate(topo.gpus):
        for target, count in g.nvlinks:
            if target in index:
                counts[i][index[target]] = count
            else:  # an NVSwitch (or a target outside the file): a switch port of `count`
                for j in range(n):
                    if j != i:
                        counts[i][j] = max(counts[i][j], count)
    return counts
