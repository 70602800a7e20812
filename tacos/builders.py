"""Build topologies from Python without writing TDL.

Bandwidths are bytes/s and latencies seconds, or texts with units (``"50GB/s"``, ``"0.5us"``).

>>> from tacos.builders import TopologyBuilder, mesh
>>> mesh(4, 4, bandwidth="50GB/s", latency=0.5e-6).n_npus
16
>>> b = TopologyBuilder("pair")
>>> a, c = b.npus(2)
>>> b.link(a, c, bandwidth=25e9, latency=1e-6, both=True)
>>> len(b.build().links)
2
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from tacos.errors import TacosError
from tacos.model import generators as gen
from tacos.model.topology import Link, Npu, Switch, Topology
from tacos.model.units import as_quantity
from tacos.model.validate import check_link, check_policy, check_topology


class TopologyBuilder:
    """Incremental topology construction: NPUs, switches and links by integer handle.

    Handles returned by :meth:`npus` and :meth:`switch` are final NPU ids for NPUs; switches
    get their ids (after all NPUs) when :meth:`build` runs.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._npus: list[str] = []
        self._switches: list[tuple[str, str, int | None]] = []
        self._links: list[tuple[int, int, float, float, int, int | None, str]] = []
        self._failed: set[int] = set()

    def npus(self, count: int, prefix: str = "npu") -> list[int]:
        """Add ``count`` NPUs named ``prefix[i]``; returns their ids."""
        start = len(self._npus)
        self._npus.extend(f"{prefix}[{start + i}]" for i in range(count))
        return list(range(start, start + count))

    def switch(self, name: str, policy: str = "full", degree: int | None = None) -> int:
        """Add a switch; returns a handle (negative until :meth:`build` numbers it)."""
        check_policy(policy, degree, f"switch {name!r}")
        self._switches.append((name, policy, degree))
        return -len(self._switches)

    def link(self, src: int, dst: int, *, bandwidth: float | str, latency: float | str = 0.0,
             multiplicity: int = 1, both: bool = False, dim: int | None = None,
             tag: str = "") -> None:
        """Add ``src -> dst`` (and back when ``both``); bandwidth in B/s and latency in s, or
        texts with units (``"25GB/s"``, ``"0.7us"``)."""
        bandwidth = as_quantity(bandwidth, "bandwidth", f"link {src} -> {dst} bandwidth")
        latency = as_quantity(latency, "time", f"link {src} -> {dst} latency")
        check_link(Link(src, dst, latency, bandwidth, multiplicity), None,
                   f"link {src} -> {dst}")
        self._links.append((src, dst, latency, bandwidth, multiplicity, dim, tag))
        if both:
            self._links.append((dst, src, latency, bandwidth, multiplicity, dim, tag))

    def fail(self, npu: int) -> None:
        """Mark an NPU failed (its links are dropped)."""
        self._failed.add(npu)

    def build(self) -> Topology:
        """The frozen :class:`Topology` (checked: a link to a node that was never added, or a
        failed id that is not an NPU, raises :class:`~tacos.errors.TacosError`)."""
        n = len(self._npus)

        def node(h: int) -> int:
            return h if h >= 0 else n + (-h - 1)

        bad = sorted(v for v in self._failed if not 0 <= v < n)
        if bad:
            raise TacosError(f"cannot fail {bad[0]}: not an NPU of this builder (ids 0..{n - 1})")
        npus = tuple(Npu(i, name, i in self._failed) for i, name in enumerate(self._npus))
        switches = tuple(Switch(n + j, name, pol, deg)
                         for j, (name, pol, deg) in enumerate(self._switches))
        live, dead = [], []
        for s, d, lat, bw, m, dim, tag in self._links:
            lk = Link(node(s), node(d), lat, bw, m, dim, tag)
            (dead if s in self._failed or d in self._failed else live).append(lk)
        return check_topology(Topology(npus, switches, tuple(live), self.name, tuple(dead)))


def _user_errors(fn: Callable[..., Topology]) -> Callable[..., Topology]:
    """Report a generator's complaint (e.g. a 6-NPU hypercube) as a TacosError."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Topology:
        try:
            return fn(*args, **kwargs)
        except gen.GeneratorError as exc:
            raise TacosError(f"{fn.__name__}: {exc}") from None

    return wrapper


def _axis_props(dims: tuple[int, ...], bandwidth: float | Sequence[float],
                latency: float | Sequence[float]) -> dict[str, tuple[float, float]]:
    def per_dim(value: Any) -> list[Any]:
        many = isinstance(value, Sequence) and not isinstance(value, str)
        return list(value) if many else [value] * len(dims)

    bws, lats = per_dim(bandwidth), per_dim(latency)
    if len(bws) != len(dims) or len(lats) != len(dims):
        raise TacosError(f"{len(dims)} dimensions but {len(bws)} bandwidths and {len(lats)} "
                         "latencies", hint="give one bandwidth/latency, or one per dimension")
    return {gen.AXES[k]: (bws[k], lats[k]) for k in range(len(dims))}


def _from_pattern(p: gen.Pattern, name: str, props: dict[str, tuple[float, float]],
                  policy: str = "full", degree: int | None = None) -> Topology:
    b = TopologyBuilder(name)
    ids = b.npus(p.n_npus)
    for suffix, count in p.switch_groups:
        ids.extend(b.switch(f"{suffix}[{i}]", policy, degree) for i in range(count))
    for u, v, label, dim in p.links:
        bw, lat = props.get(label) or props["*"]
        b.link(ids[u], ids[v], bandwidth=bw, latency=lat, dim=dim, tag=label)
    return b.build()


@_user_errors
def ring(n: int, *, bandwidth: float, latency: float = 0.0,
         bidirectional: bool = True) -> Topology:
    """A ring of ``n`` NPUs."""
    return _from_pattern(gen.ring(n, bidirectional), f"ring {n}", {"*": (bandwidth, latency)})


@_user_errors
def mesh(*dims: int, bandwidth: float | Sequence[float],
         latency: float | Sequence[float] = 0.0) -> Topology:
    """A 1D/2D/3D mesh; bandwidth and latency may be given per dimension (x, y, z)."""
    return _from_pattern(gen.grid(dims, False), "mesh", _axis_props(dims, bandwidth, latency))


@_user_errors
def torus(*dims: int, bandwidth: float | Sequence[float],
          latency: float | Sequence[float] = 0.0) -> Topology:
    """A 1D/2D/3D torus (wrap-around for sizes > 2); per-dimension values allowed."""
    return _from_pattern(gen.grid(dims, True), "torus", _axis_props(dims, bandwidth, latency))


@_user_errors
def fully_connected(n: int, *, bandwidth: float, latency: float = 0.0) -> Topology:
    """``n`` NPUs linked all to all."""
    return _from_pattern(gen.fully_connected(n), "fully connected", {"*": (bandwidth, latency)})


@_user_errors
def hypercube(n: int, *, bandwidth: float, latency: float = 0.0) -> Topology:
    """A binary hypercube of ``n`` = 2^d NPUs."""
    return _from_pattern(gen.hypercube(n), "hypercube", {"*": (bandwidth, latency)})


@_user_errors
def star(n: int, *, bandwidth: float, latency: float = 0.0, policy: str = "full",
         degree: int | None = None) -> Topology:
    """``n`` NPUs on one switch with the given unwinding policy."""
    return _from_pattern(gen.star(n), "star", {"*": (bandwidth, latency)}, policy, degree)


@_user_errors
def multi_dim(dims: list[tuple[str, int]], bandwidths: list[float],
              latencies: list[float]) -> Topology:
    """``multi_dim([("Ring", 2), ("FullyConnected", 4), ("Switch", 8)], bws, lats)``."""
    props = {f"d{k}": (bandwidths[k], latencies[k]) for k in range(len(dims))}
    return _from_pattern(gen.multi_dim(dims), "multi-dimensional", props)
