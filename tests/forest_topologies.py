"""Small topologies shared by the forest solver's tests (imported by name: pytest puts this
directory on ``sys.path``)."""

from __future__ import annotations

import tacos
from tacos.model.topology import Link, Topology


def tdl_torus(*dims: int, bw: str = "50GB/s") -> Topology:
    """A TDL torus: NPUs named ``t[x,y,...]``."""
    shape = ", ".join(map(str, dims))
    return tacos.parse(f'topology "t"\ntorus t[{shape}] {bw} 1us\n', source="t").topology


def slower(topo: Topology, src: int, dst: int) -> Topology:
    """``topo`` with the link src -> dst at half its bandwidth."""
    links = [Link(lk.src, lk.dst, lk.alpha, lk.bandwidth / 2, lk.multiplicity, lk.dim, lk.tag)
             if (lk.src, lk.dst) == (src, dst) else lk for lk in topo.links]
    return topo.with_links(links)


def mini_dgx_tdl(nodes: int, gpus: int = 4) -> str:
    """``nodes`` NVSwitch islands of ``gpus`` GPUs, GPU i of every node on rail switch i (a
    reduced DGX-A100: 300 GB/s NVSwitch ports, 25 GB/s NICs, α 0.7 and 2 µs)."""
    return f"""topology "mini DGX"
npu gpu[{nodes * gpus}]
switch nvs[{nodes}]
switch rail[{gpus}] unwind ring
for n in 0..{nodes - 1}, i in 0..{gpus - 1} {{
  link gpu[{gpus}*n+i] <-> nvs[n] 300GB/s 0.7us tag nvlink
  link gpu[{gpus}*n+i] <-> rail[i] 25GB/s 2us tag nic
}}
"""


def mini_dgx(nodes: int, gpus: int = 4) -> Topology:
    """The topology of :func:`mini_dgx_tdl`."""
    return tacos.parse(mini_dgx_tdl(nodes, gpus)).topology
