"""NCCL's ring search remembered on disk: the same rings as searching, read back without a
search, and ignored when the file is damaged or the cache is off."""

from __future__ import annotations

import pytest

import tacos
from tacos.solvers.nccl import rings as rings_mod
from tacos.solvers.nccl import search_cache
from tacos.solvers.nccl.system import system


def _mesh_system():
    topo = tacos.parse("use dgx1").topology
    return system(topo, topo.live_npus)


def _fresh_rings():
    """The rings of a freshly built system (no per-system memo)."""
    sys_ = _mesh_system()
    return rings_mod.intra_rings(sys_, sys_.nodes[0])


def test_cached_rings_are_the_searched_ones_and_are_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", "")
    searched = _fresh_rings()
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    assert _fresh_rings() == searched  # computed and stored
    files = list((tmp_path / "nccl-rings").glob("*.json"))
    assert len(files) == 1

    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr(rings_mod, "_searched", no_search)
    assert _fresh_rings() == searched  # read back, no search


@pytest.mark.parametrize("damage", ["{not json", "[[0, 1]]", "[]", '"rings"'])
def test_a_damaged_file_is_searched_again(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    searched = _fresh_rings()
    (path,) = (tmp_path / "nccl-rings").glob("*.json")
    path.write_text(damage)
    assert _fresh_rings() == searched
    assert search_cache._is_rings(__import__("json").loads(path.read_text()), list(range(8)))


def test_cache_off_writes_nothing_and_the_key_follows_the_inputs(tmp_path, monkeypatch):
    monkeypatch.delenv("TACOS_CACHE_DIR", raising=False)  # the user cache folder
    assert search_cache.cache_dir().parts[-2:] == ("tacos", "nccl-rings")
    monkeypatch.setenv("TACOS_CACHE_DIR", "")
    assert search_cache.cache_dir() is None
    _fresh_rings()
    assert not any(tmp_path.iterdir())
    a = search_cache.key_of("intra_rings", {"members": [0, 1, 2], "seed": 0})
    assert a == search_cache.key_of("intra_rings", {"seed": 0, "members": [0, 1, 2]})
    assert a != search_cache.key_of("intra_rings", {"members": [0, 1, 2], "seed": 1})


def test_an_unwritable_cache_still_answers(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TACOS_CACHE_DIR", str(blocker))  # its sub-folder cannot be made
    sys_ = _mesh_system()
    assert len(rings_mod.intra_rings(sys_, sys_.nodes[0])) == 6


def test_a_search_that_finds_no_ring_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    topo = tacos.parse('topology "line"\nmesh m[3] 50GiB/s 0.5us\n').topology

    def rings_of_line():
        sys_ = system(topo, topo.live_npus)
        return rings_mod.intra_rings(sys_, sys_.nodes[0])

    with pytest.raises(tacos.TacosError) as searched:
        rings_of_line()  # a path of 3 NPUs has no ring
    (path,) = (tmp_path / "nccl-rings").glob("*.json")
    assert search_cache._is_no_ring(__import__("json").loads(path.read_text()))

    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr(rings_mod, "_searched", no_search)
    with pytest.raises(tacos.TacosError) as read:
        rings_of_line()  # read back: the same error, no search
    assert (read.value.message, read.value.hint) == (searched.value.message,
                                                     searched.value.hint)
