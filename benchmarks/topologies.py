"""The benchmark systems, written in TDL and parsed with :func:`tacos.parse`.

Latencies are not given by the seed paper; every synthetic link here uses α = 0.5 µs (the TACOS
examples' value).  Presets (DGX-1, DGX-A100, DGX-H100, MI250) come with tacos.
"""

from __future__ import annotations

from tacos.model.collective import Collective
from tacos.model.patterns import build
from tacos.model.topology import Topology
from tacos.spec import Spec

ALPHA = "0.5us"


def parse(text: str, name: str) -> Topology:
    """Parse TDL ``text`` (no collective) into a topology."""
    import tacos

    spec: Spec = tacos.parse(f'topology "{name}"\n{text}\n', source=name)
    return spec.topology


def mesh(w: int, h: int, bw: str = "100GB/s", alpha: str = ALPHA,
         fail: tuple[int, ...] = ()) -> Topology:
    """A w x h mesh; ``fail`` lists failed NPU ids (row-major, x fastest)."""
    text = f"mesh m[{w}, {h}] {bw} {alpha}"
    if fail:
        refs = ", ".join(f"m[{v % w}, {v // w}]" for v in fail)
        text += f"\nfail npu {refs}"
    name = f"Mesh {w}x{h}" + (f" (NPUs {', '.join(map(str, fail))} failed)" if fail else "")
    return parse(text, name)


def torus(*shape: int, bw: str = "50GiB/s", alpha: str = ALPHA) -> Topology:
    """A 2D/3D torus."""
    dims = ", ".join(map(str, shape))
    return parse(f"torus t[{dims}] {bw} {alpha}", "Torus " + "x".join(map(str, shape)))


def dragonfly_4x5() -> Topology:
    """Seed Fig. 19: 5 groups of 4 fully connected routers, 400 GB/s local, 200 GB/s global."""
    return parse(f"dragonfly d[4, 5] local 400GB/s {ALPHA} global 200GB/s {ALPHA}",
                 "DragonFly 4x5")


def switch_switch_8x4() -> Topology:
    """Seed Fig. 19: 4 groups of 8 NPUs on a 300 GB/s switch; the 4 NPUs with the same local
    index share a 25 GB/s scale-out switch.  Unwinding for synthesis follows the seed: full
    (degree max) for the scale-up switches, degree 1 (ring) for the scale-out ones."""
    text = "\n".join([
        "npu n[32]",
        "switch up[4] unwind full",
        "switch out[8] unwind ring",
        f"for j in 0..3, i in 0..7 {{ link n[i + 8 * j] <-> up[j] 300GB/s {ALPHA} dim 0 }}",
        f"for j in 0..3, i in 0..7 {{ link n[i + 8 * j] <-> out[i] 25GB/s {ALPHA} dim 1 }}",
    ])
    return parse(text, "Switch_Switch 8x4")


def ring_fc_switch(nodes: int) -> Topology:
    """Seed Table I: ``Ring(2)_FullyConnected(4)_Switch(nodes)`` at 200/100/50 GB/s; the
    scale-out switch is unwound with degree 1 (ring) as in the seed."""
    return parse(f"dims npu Ring(2)_FullyConnected(4)_Switch({nodes}) 200GB/s {ALPHA}, "
                 f"100GB/s {ALPHA}, 50GB/s {ALPHA} unwind ring",
                 f"Ring(2)_FC(4)_Switch({nodes})")


def ring_ring(a: int, b: int, bw: str = "100GB/s") -> Topology:
    """Seed Table II: ``Ring(a)_Ring(b)`` (a 2D torus of bidirectional rings)."""
    return parse(f"dims npu Ring({a})_Ring({b}) {bw} {ALPHA}", f"Ring({a})_Ring({b})")


def preset(name: str, **params: int) -> Topology:
    """A shipped preset, e.g. ``preset('dgx_a100', nodes=2)``."""
    args = ", ".join(f"{k}={v}" for k, v in params.items())
    return parse(f"use {name}" + (f"({args})" if args else ""),
                 name + (f" x{params['nodes']}" if "nodes" in params else ""))


def everyone(kind: str, topology: Topology, size: int, chunks: int = 1,
             root: int | None = None) -> Collective:
    """A standard collective over every live NPU."""
    return build(kind, topology.live_npus, size=size, chunks_per_npu=chunks, root=root)
