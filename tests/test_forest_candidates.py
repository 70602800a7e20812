"""forest's candidate packings are data: an ordered table the solver loops over."""

from __future__ import annotations

from tacos.solvers.forest import candidates as cands
from tacos.solvers.forest.candidates import ONCE, PER_PACKING, Candidate, Context, candidates
from tacos.solvers.forest.solver import ForestSolver


def test_the_table_names_options_the_solver_declares() -> None:
    table = PER_PACKING + ONCE
    names = [c.name for c in table]
    assert len(set(names)) == len(names)
    for i, c in enumerate(table):
        assert c.option in ForestSolver.options and c.tuned_on, c.name
        assert c.instead_of is None or c.instead_of in names[:i]


def _ctx() -> Context:
    return Context([], None, (0, 1), order=True, fixed=False, stepped={}, deep={})


def test_candidates_ask_in_order_and_honour_options_and_instead_of() -> None:
    asked: list[str] = []

    def make(name: str, result):
        def build(ctx):
            asked.append(name)
            return result
        return Candidate(name, name, build, lambda ctx: True, ("test",))

    a, b = make("a", [["A"]]), make("b", None)
    c = Candidate("c", "c", lambda ctx: asked.append("c") or [["C"]], lambda ctx: True,
                  ("test",), instead_of="a")
    d = make("d", [["D"]])
    table = (a, b, c, d)
    assert candidates(table, _ctx(), {}) == [[["A"]], [["D"]]]
    assert asked == ["a", "b", "d"]  # c stands in for a only when a builds nothing
    asked.clear()
    assert candidates(table, _ctx(), {"a": False, "d": False}) == [[["C"]]]
    assert asked == ["b", "c"]
    shut = Candidate("e", "e", lambda ctx: [["E"]], lambda ctx: ctx.order is False, ("test",))
    assert candidates((shut,), _ctx(), {}) == []  # the gate holds it back


def test_the_integer_program_candidates_ask_for_small_direct_fabrics() -> None:
    from tacos.builders import ring, star

    timed, shallow = PER_PACKING[0], PER_PACKING[1]
    assert (timed.name, shallow.name, shallow.instead_of) == ("timed", "shallow", "timed")

    def ctx(topo) -> Context:
        return Context([], topo, tuple(topo.live_npus), True, False, {}, {})

    assert timed.gate(ctx(ring(8, bandwidth=1e9, latency=1e-6)))
    assert not shallow.gate(ctx(star(8, bandwidth=1e9, latency=1e-6)))  # through a switch
    big = ring(cands.SHALLOW_MAX + 1, bandwidth=1e9, latency=1e-6)
    assert not timed.gate(ctx(big))
