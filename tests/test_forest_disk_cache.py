"""forest's step-timed program and Lovász packings remembered on disk per topology shape: a hit
gives what solving again gives (the same trees, the same schedule bytes) without solving, other
inputs miss, a damaged file is solved again, and an empty ``TACOS_CACHE_DIR`` turns it off."""

from __future__ import annotations

import json

import pytest
from tacos.backends.json_schedule import dumps
from test_forest_timed import BOXES

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest import disk_cache, memo, timed_links
from tacos.solvers.forest import pack as pack_mod
from tacos.solvers.forest.shallow import have_cp_sat
from tacos.solvers.forest.solver import plan_forest
from tacos.solvers.islands import find_islands

needs_cp_sat = pytest.mark.skipif(not have_cp_sat(),
                                  reason="OR-Tools (the ilp extra) is not installed")


def _boxes():
    topo = tacos.parse(BOXES, source="boxes").topology
    return topo, tuple(topo.live_npus)


def _timed(topo, group):
    forest = plan_forest(topo, group, group, "copy", False, 2)
    return timed_links.timed_link_trees(topo, group, forest.roots, 2, forest.rate.caps,
                                        find_islands(topo, group))


def _no_solve(*args, **kwargs):
    raise AssertionError("solved again")


def _as_tuples(trees):
    return [(t.root, t.mult, list(t.edges), list(t.paths), t.order) for t in trees]


def _program(steps: int = 3) -> tuple:
    """A tiny step-timed program's inputs (a path 0 -> 1 -> 2, one tree of root 0)."""
    arcs = {(0, 1): (((0, 1),), 1), (1, 2): (((1, 2),), 1)}
    caps = {(0, 1): 1, (1, 2): 1}
    return ((0, 1, 2), [0], 1, arcs, caps, dict(caps), [(0, {0: 0, 1: 1, 2: 2})], [], steps)


def test_a_program_answer_is_read_back_and_other_inputs_miss(tmp_path, monkeypatch):
    answer = {(0, 0): {1: (0, 1), 2: (1, 2)}}
    calls = []
    monkeypatch.setattr(timed_links, "_solved", lambda *a: calls.append(a[8]) or answer)
    monkeypatch.setenv("TACOS_CACHE_DIR", "")
    assert timed_links._solve(*_program()) == answer and calls == [3]
    assert disk_cache.cache_dir() is None and not any(tmp_path.iterdir())
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    assert timed_links._solve(*_program()) == answer and calls == [3, 3]  # solved, stored
    (path,) = (tmp_path / "forest").glob("*.json")
    assert timed_links._solve(*_program()) == answer and calls == [3, 3]  # read back
    assert timed_links._solve(*_program(4)) == answer and calls == [3, 3, 4]  # other input
    for damage in ("{not json", "[[0, 0, []]]", '[[0, 0, [[1, 0, 1]]]]', '"trees"'):
        path.write_text(damage)
        assert timed_links._solve(*_program()) == answer
    assert calls == [3, 3, 4, 3, 3, 3, 3]  # each damaged file solved again, then rewritten
    assert timed_links._solve(*_program()) == answer and len(calls) == 7
    # "nothing found within the limit" is an answer too
    monkeypatch.setattr(timed_links, "_solved", lambda *a: calls.append(a[8]))
    assert timed_links._solve(*_program(2)) is None and calls[-1] == 2
    assert timed_links._solve(*_program(2)) is None and len(calls) == 8


@pytest.mark.slow
@needs_cp_sat
def test_the_step_timed_trees_are_read_back_without_cp_sat(tmp_path, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(timed_links, "BUILD", False)  # the whole program (what is stored)
    topo, group = _boxes()
    solved = _timed(topo, group)  # solved and stored (one step count short, the next found)
    assert solved is not None
    answers = {json.loads(f.read_text()) is None for f in (tmp_path / "forest").glob("*.json")}
    assert answers == {True, False}
    monkeypatch.setattr(timed_links, "_solved", _no_solve)
    assert _as_tuples(_timed(topo, group)) == _as_tuples(solved)  # read back, not solved


def test_a_packing_is_read_back_when_large_enough_and_the_empty_folder_turns_it_off(
        tmp_path, monkeypatch):
    topo, group = _boxes()
    monkeypatch.setenv("TACOS_CACHE_DIR", "")
    assert disk_cache.cache_dir() is None
    cold = plan_forest(topo, group, group, "copy", False, 4)
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    assert plan_forest(topo, group, group, "copy", False, 4).tests == cold.tests
    assert not (tmp_path / "forest").exists()  # too few max-flow tests to store
    monkeypatch.setattr(disk_cache, "PACK_MIN_TESTS", 0)
    stored = plan_forest(topo, group, group, "copy", False, 4)
    assert len(list((tmp_path / "forest").glob("*.json"))) == 1
    monkeypatch.setattr(pack_mod, "pack_trees", _no_solve)
    hit = plan_forest(topo, group, group, "copy", False, 4)
    assert _as_tuples(hit.trees) == _as_tuples(stored.trees) == _as_tuples(cold.trees)
    assert hit.tests == cold.tests
    with pytest.raises(AssertionError, match="solved again"):  # another tree count misses
        plan_forest(topo, group, group, "copy", False, 3)


def test_inputs_json_cannot_hold_are_computed_without_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    assert disk_cache.remembered("pack", {"k": object()}, lambda: 7, int, int) == 7
    assert not (tmp_path / "forest").exists()


def test_the_key_follows_the_inputs_in_their_order():
    a = disk_cache.key_of("pack", {"caps": [[0, 1, 2], [1, 0, 2]]})
    assert a == disk_cache.key_of("pack", {"caps": [[0, 1, 2], [1, 0, 2]]})
    assert a != disk_cache.key_of("pack", {"caps": [[1, 0, 2], [0, 1, 2]]})
    assert a != disk_cache.key_of("timed", {"caps": [[0, 1, 2], [1, 0, 2]]})


@pytest.mark.slow
@needs_cp_sat
def test_a_solve_from_the_cache_has_the_same_bytes(tmp_path, monkeypatch):
    topo, group = _boxes()
    coll = build("allreduce", group, size=len(group) * 2**23)

    def solved() -> str:
        memo.clear()
        s = tacos.synthesize(topo, coll, solver="forest", trees=2)
        memo.clear()
        rep = verify_schedule(s)
        assert rep.ok, rep.text(5)
        return dumps(s)

    monkeypatch.setenv("TACOS_CACHE_DIR", "")
    cold = solved()
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(disk_cache, "PACK_MIN_TESTS", 0)
    assert solved() == cold  # solved and stored
    monkeypatch.setattr(timed_links, "_solved", _no_solve)
    monkeypatch.setattr(pack_mod, "pack_trees", _no_solve)
    assert solved() == cold  # every program and packing read back
