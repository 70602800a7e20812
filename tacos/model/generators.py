"""Topology generators: the link patterns behind ``ring``, ``mesh``, ``torus``, ``dims`` ...

A generator returns a :class:`Pattern`: how many NPUs and switches it creates and its directed
links between *local* indices (NPUs ``0..n-1``, switches ``n..n+s-1``), each with a label that
selects its bandwidth and latency (``x``/``y``/``z`` per mesh dimension, ``local``/``global`` for
dragonfly, ``down``/``up`` for fat-trees, ``d0``/``d1``... for ``dims``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod


class GeneratorError(ValueError):
    """A generator was given an impossible shape or option."""


@dataclass
class Pattern:
    """NPU count, switch groups (name suffix, count) and labelled directed links."""

    n_npus: int
    shape: tuple[int, ...]
    switch_groups: list[tuple[str, int]] = field(default_factory=list)
    links: list[tuple[int, int, str, int | None]] = field(default_factory=list)
    labels: tuple[str, ...] = ()
    switch_labels: dict[int, str] = field(default_factory=dict)

    _seen: set[tuple[int, int]] = field(default_factory=set, repr=False)

    def add(self, u: int, v: int, label: str, dim: int | None, both: bool = True) -> None:
        """Add ``u -> v`` (and ``v -> u`` when ``both``) unless already present."""
        for a, b in ((u, v), (v, u)) if both else ((u, v),):
            if a != b and (a, b) not in self._seen:
                self._seen.add((a, b))
                self.links.append((a, b, label, dim))


AXES = ("x", "y", "z")


def _coords(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in shape:
        out.append(flat % n)
        flat //= n
    return out


def _flat(coords: list[int], shape: tuple[int, ...]) -> int:
    flat, stride = 0, 1
    for c, n in zip(coords, shape, strict=True):
        flat += c * stride
        stride *= n
    return flat


def grid(shape: tuple[int, ...], wrap: bool) -> Pattern:
    """2D/3D mesh (``wrap=False``) or torus (``wrap=True``); labels ``x``, ``y``, ``z``."""
    if not 1 <= len(shape) <= 3:
        raise GeneratorError("meshes and tori take 1, 2 or 3 dimensions, e.g. m[4,4]")
    p = Pattern(prod(shape), shape, labels=AXES[: len(shape)])
    for v in range(p.n_npus):
        c = _coords(v, shape)
        for axis, n in enumerate(shape):
            if n < 2:
                continue
            if c[axis] + 1 < n or (wrap and n > 2):
                d = list(c)
                d[axis] = (c[axis] + 1) % n
                p.add(v, _flat(d, shape), AXES[axis], axis)
    return p


def ring(n: int, bidirectional: bool) -> Pattern:
    """Ring of n NPUs; one-way unless ``bidirectional``."""
    if n < 2:
        raise GeneratorError("a ring needs at least 2 NPUs")
    p = Pattern(n, (n,), labels=("ring",))
    for v in range(n):
        p.add(v, (v + 1) % n, "ring", 0, both=bidirectional)
    return p


def fully_connected(n: int) -> Pattern:
    """Every NPU linked to every other NPU both ways."""
    p = Pattern(n, (n,), labels=("link",))
    for u in range(n):
        for v in range(u + 1, n):
            p.add(u, v, "link", 0)
    return p


def hypercube(n: int) -> Pattern:
    """Binary hypercube of n = 2^d NPUs: u and u XOR 2^k are linked."""
    if n < 2 or n & (n - 1):
        raise GeneratorError(f"a hypercube has a power-of-two NPU count, not {n}")
    p = Pattern(n, (n,), labels=("link",))
    d = n.bit_length() - 1
    for u in range(n):
        for k in range(d):
            p.add(u, u ^ (1 << k), "link", k)
    return p


def star(n: int) -> Pattern:
    """n NPUs attached to one switch (label ``port``)."""
    p = Pattern(n, (n,), switch_groups=[("switch", 1)], labels=("port",))
    for v in range(n):
        p.add(v, n, "port", 0)
    return p


def dragonfly(routers: int, groups: int) -> Pattern:
    """``groups`` groups of ``routers`` fully connected routers (one NPU each); every pair of
    groups shares one global link, spread round-robin over the routers of each group."""
    if routers < 1 or groups < 2:
        raise GeneratorError("a dragonfly needs at least 1 router per group and 2 groups")
    n = routers * groups
    p = Pattern(n, (routers, groups), labels=("local", "global"))
    for g in range(groups):
        for a in range(routers):
            for b in range(a + 1, routers):
                p.add(g * routers + a, g * routers + b, "local", 0)
    for g in range(groups):
        for h in range(g + 1, groups):
            ra = ((h - g) % groups - 1) % routers
            rb = ((g - h) % groups - 1) % routers
            p.add(g * routers + ra, h * routers + rb, "global", 1)
    return p


def fat_tree(hosts: int, leaves: int, spines: int) -> Pattern:
    """Two-tier Clos: hosts spread evenly over leaf switches, every leaf linked to every spine."""
    if leaves < 1 or spines < 1 or hosts < 2:
        raise GeneratorError("a fat-tree needs hosts >= 2, leaves >= 1 and spines >= 1")
    if hosts % leaves:
        raise GeneratorError(f"{hosts} hosts do not spread evenly over {leaves} leaves")
    p = Pattern(hosts, (hosts,), switch_groups=[("leaf", leaves), ("spine", spines)],
                labels=("down", "up"))
    per = hosts // leaves
    for h in range(hosts):
        p.add(h, hosts + h // per, "down", 0)
    for leaf in range(leaves):
        for s in range(spines):
            p.add(hosts + leaf, hosts + leaves + s, "up", 1)
    return p


def size_of(kind: str, shape: tuple[int, ...], options: dict[str, int] | None = None
            ) -> tuple[int, int]:
    """(nodes, directed links) a generator would create, at most, computed without building it.

    ``kind`` is a generator name or ``'dims'`` (then ``shape`` holds the dimension sizes and
    ``options`` maps dimension index to 1 for a ``Switch`` dimension, 2 for ``FullyConnected``).
    Sizes below 1 count as 0 (the generator itself reports them).
    """
    shape = tuple(max(0, n) for n in shape)
    opts = options or {}
    n = prod(shape)
    if kind in ("mesh", "torus"):
        return n, sum(2 * (n // k) * k for k in shape if k > 1)
    if kind in ("ring", "biring"):
        return n, 2 * n
    if kind == "fullyconnected":
        return n, n * (n - 1)
    if kind == "hypercube":
        return n, n * max(1, n.bit_length())
    if kind == "star":
        return n + 1, 2 * n
    if kind == "dragonfly":
        routers, groups = shape
        return n, groups * routers * (routers - 1) + groups * (groups - 1)
    if kind == "fattree":
        leaves, spines = max(0, opts.get("leaves", 1)), max(0, opts.get("spines", 1))
        return n + leaves + spines, 2 * n + 2 * leaves * spines
    if kind == "dims":
        nodes, links = n, 0
        for k, size in enumerate(shape):
            if size < 2:
                continue
            form = opts.get(k, 0)
            if form == 1:  # Switch: one switch per line, two links per NPU
                nodes += n // size
                links += 2 * n
            elif form == 2:  # FullyConnected
                links += n * (size - 1)
            else:  # Ring, both ways
                links += 2 * n
        return nodes, links
    raise GeneratorError(f"unknown generator {kind!r}")


_DIM = re.compile(r"([A-Za-z]+)\(([^()]+)\)")
DIM_KINDS = {"ring": "Ring", "fullyconnected": "FullyConnected", "fc": "FullyConnected",
             "switch": "Switch"}


def parse_dimspec(spec: str) -> list[tuple[str, str]]:
    """``'Ring(2)_FC(n)'`` → ``[('Ring', '2'), ('FullyConnected', 'n')]`` (sizes unevaluated)."""
    out = []
    for part in spec.split("_"):
        m = _DIM.fullmatch(part)
        if not m:
            raise GeneratorError(f"cannot read dimension {part!r}")
        kind = DIM_KINDS.get(m.group(1).lower())
        if kind is None:
            raise GeneratorError(
                f"unknown dimension kind {m.group(1)!r}; use Ring, FullyConnected (FC) or Switch"
            )
        out.append((kind, m.group(2)))
    return out


def multi_dim(dims: list[tuple[str, int]]) -> Pattern:
    """The seed papers' ``Ring(a)_FullyConnected(b)_Switch(c)`` notation.

    NPU ``i`` has coordinates with the first dimension fastest.  Along dimension k the NPUs
    sharing all other coordinates form a bidirectional ring, a fully connected group, or hang off
    one switch (a switch group ``d<k>``).  Links carry ``dim = k`` and label ``d<k>``.
    """
    shape = tuple(n for _, n in dims)
    if any(n < 1 for n in shape):
        raise GeneratorError("every dimension needs at least 1 NPU")
    n_npus = prod(shape)
    labels = tuple(f"d{k}" for k in range(len(dims)))
    switch_groups = []
    switch_base: dict[int, int] = {}
    next_switch = n_npus
    for k, (kind, n) in enumerate(dims):
        if kind == "Switch":
            count = n_npus // n
            switch_groups.append((f"d{k}_switch", count))
            switch_base[k] = next_switch
            next_switch += count
    p = Pattern(n_npus, shape, switch_groups=switch_groups, labels=labels)
    for k, (kind, n) in enumerate(dims):
        if n < 2:
            continue
        # each "line" along dimension k: NPUs whose coordinate k varies
        lines: dict[int, list[int]] = {}
        for v in range(n_npus):
            c = _coords(v, shape)
            key = _flat([0 if a == k else x for a, x in enumerate(c)], shape)
            lines.setdefault(key, []).append(v)
        for line_no, key in enumerate(sorted(lines)):
            members = lines[key]
            if kind == "Ring":
                for i, v in enumerate(members):
                    p.add(v, members[(i + 1) % n], f"d{k}", k)
            elif kind == "FullyConnected":
                for i, u in enumerate(members):
                    for v in members[i + 1:]:
                        p.add(u, v, f"d{k}", k)
            else:
                sw = switch_base[k] + line_no
                p.switch_labels[sw] = f"d{k}"
                for v in members:
                    p.add(v, sw, f"d{k}", k)
    return p
