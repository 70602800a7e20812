"""The automorphisms of a capacity graph are enumerated once per pattern of equal capacities."""

from __future__ import annotations

from tacos.solvers.forest import shallow


def _ring_caps(n: int, scale: int) -> dict[tuple[int, int], int]:
    caps = {}
    for v in range(n):
        caps[v, (v + 1) % n] = 2 * scale  # clockwise twice as wide as counter-clockwise
        caps[(v + 1) % n, v] = scale
    return caps


def test_scaled_capacities_share_one_enumeration(monkeypatch):
    shallow._AUTOMORPHISMS.clear()
    calls = []
    real = shallow._enumerate
    monkeypatch.setattr(shallow, "_enumerate", lambda *a: calls.append(a) or real(*a))
    nodes = tuple(range(6))
    one = shallow.automorphisms(nodes, _ring_caps(6, 1))
    three = shallow.automorphisms(nodes, _ring_caps(6, 3))
    assert len(calls) == 1
    assert one == three == real(nodes, _ring_caps(6, 3))
    assert len(one) == 6  # the rotations: the directions differ, so no reflection
    # a different pattern (both directions equal: reflections too) is enumerated anew
    flat = {a: 5 for a in _ring_caps(6, 1)}
    assert len(shallow.automorphisms(nodes, flat)) == 12
    assert len(calls) == 2
