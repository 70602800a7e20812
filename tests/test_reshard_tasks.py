"""Sharding specs, meshes and the unit tasks of seed 001's Table 2 cases, checked by hand."""

from __future__ import annotations

import pytest

from tacos.reshard import DeviceMesh, Reshard, ShardingError, ShardingSpec
from tacos.reshard.sharding import split, tiles
from tacos.reshard.tasks import piece_sizes, reshard_collective, task_chunks

GIB = 1 << 30
MIB = 1 << 20
SHAPE = (1024, 1024, 512)  # Table 2's tensor, float32: 2 GiB


def mesh(first_host: int, shape: tuple[int, int], gpus: int = 4) -> DeviceMesh:
    hosts, per = shape
    return DeviceMesh.of([(first_host + h) * gpus + g for h in range(hosts) for g in range(per)],
                         shape)


def table(tasks) -> set[tuple]:
    """Tasks as (region, senders, receivers, bytes) for order-free comparison."""
    return {(t.region, t.senders, t.receivers, t.nbytes) for t in tasks}


SRC, DST = mesh(0, (2, 4)), mesh(2, (2, 4))
HALF0, HALF1 = (0, 512), (512, 1024)
ALL = (0, 1024)
A, B = (0, 1, 2, 3), (4, 5, 6, 7)     # source hosts
C, D = (8, 9, 10, 11), (12, 13, 14, 15)  # destination hosts


def test_spec_forms_parse_alike() -> None:
    for text in ("S0RR", "S0 R R", "S0,R,R", ["S0", "R", "R"]):
        assert ShardingSpec.parse(text).dims == ((0,), (), ())
    assert str(ShardingSpec.parse("RS01R")) == "RS01R"
    assert ShardingSpec.parse("S10").dims == ((1, 0),)


@pytest.mark.parametrize(("text", "words"), [
    ("S0X", "cannot read"), ("S00R", "twice"), ("", "empty")])
def test_bad_spec_text(text: str, words: str) -> None:
    with pytest.raises(ShardingError, match=words):
        ShardingSpec.parse(text)


def test_tiles_follow_row_major_mesh_and_last_axis_fastest() -> None:
    m = DeviceMesh.of(range(8), (2, 4))
    t = tiles(m, ShardingSpec.parse("S01R"), (8, 3))
    assert [t[d][0] for d in range(8)] == [(i, i + 1) for i in range(8)]
    t = tiles(m, ShardingSpec.parse("S10R"), (8, 3))  # axis 0 fastest now
    assert t[1][0] == (2, 3) and t[4][0] == (1, 2)
    t = tiles(m, ShardingSpec.parse("RS1"), (3, 8))
    assert t[5][1] == (2, 4) and t[5][0] == (0, 3)


def test_uneven_split_and_empty_tiles() -> None:
    assert split(10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    with pytest.raises(ShardingError, match="some tiles would be empty"):
        Reshard.of((5, 4), DeviceMesh.of(range(4)), "S0R", DeviceMesh.of(range(4, 8)), "RR")


@pytest.mark.parametrize(("shape", "src", "dst", "words"), [
    ((4, 4), "S0", "RR", "has 1 dimension"),
    ((4, 4), "S2R", "RR", "mesh axis 2"),
    ((4, 4), "S0S0", "RR", "uses mesh axis 0 for tensor dimensions 0 and 1"),
])
def test_specs_that_do_not_fit(shape, src, dst, words) -> None:
    with pytest.raises(ShardingError, match=words):
        Reshard.of(shape, DeviceMesh.of(range(4), (2, 2)), src, DeviceMesh.of(range(4, 8),
                   (2, 2)), dst)


def test_mesh_shape_must_match_devices() -> None:
    with pytest.raises(ShardingError, match="has 8 NPUs but shape"):
        DeviceMesh.of(range(8), (2, 3))
    with pytest.raises(ShardingError, match="twice"):
        DeviceMesh.of([0, 1, 1, 2], (2, 2))


def test_case1_s0_to_s0() -> None:
    r = Reshard.of(SHAPE, SRC, "S0RR", DST, "S0RR")
    assert table(r.tasks) == {((HALF0, ALL, (0, 512)), A, C, GIB),
                              ((HALF1, ALL, (0, 512)), B, D, GIB)}


def test_case2_replicated_to_s0() -> None:
    r = Reshard.of(SHAPE, SRC, "RRR", DST, "S0RR")
    assert table(r.tasks) == {((HALF0, ALL, (0, 512)), A + B, C, GIB),
                              ((HALF1, ALL, (0, 512)), A + B, D, GIB)}


def test_case3_column_halves_to_row_halves() -> None:
    r = Reshard.of(SHAPE, SRC, "RS0R", DST, "S0RR")
    q = 512 * MIB
    assert table(r.tasks) == {((HALF0, HALF0, (0, 512)), A, C, q),
                              ((HALF0, HALF1, (0, 512)), B, C, q),
                              ((HALF1, HALF0, (0, 512)), A, D, q),
                              ((HALF1, HALF1, (0, 512)), B, D, q)}


def test_case4_64_point_to_point_tasks() -> None:
    r = Reshard.of(SHAPE, SRC, "RS01R", DST, "S01RR")
    assert len(r.tasks) == 64
    for t in r.tasks:
        (rows, cols, _) = t.region
        i, j = rows[0] // 128, cols[0] // 128
        assert t.shape == (128, 128, 512) and t.nbytes == 32 * MIB
        assert t.senders == (j,) and t.receivers == (8 + i,)


def test_case5_replicas_on_both_source_hosts() -> None:
    r = Reshard.of(SHAPE, SRC, "S1RR", DST, "S0RR")
    assert table(r.tasks) == {(((q * 256, q * 256 + 256), ALL, (0, 512)), (q, 4 + q),
                               C if q < 2 else D, 512 * MIB) for q in range(4)}


def test_case6_halves_to_thirds() -> None:
    src, dst = mesh(0, (2, 4)), mesh(2, (3, 4))
    r = Reshard.of((3072, 1024, 170), src, "S0RR", dst, "S0RR")
    row = 1024 * 170 * 4
    e = (8, 9, 10, 11), (12, 13, 14, 15), (16, 17, 18, 19)
    assert table(r.tasks) == {(((0, 1024), ALL, (0, 170)), A, e[0], 1024 * row),
                              (((1024, 1536), ALL, (0, 170)), A, e[1], 512 * row),
                              (((1536, 2048), ALL, (0, 170)), B, e[1], 512 * row),
                              (((2048, 3072), ALL, (0, 170)), B, e[2], 1024 * row)}


def test_case7_one_host_to_a_replicated_mesh() -> None:
    src, dst = mesh(0, (1, 4)), mesh(1, (2, 4))
    r = Reshard.of(SHAPE, src, "S1RR", dst, "RRR")
    assert table(r.tasks) == {(((q * 256, q * 256 + 256), ALL, (0, 512)), (q,),
                               tuple(range(4, 12)), 512 * MIB) for q in range(4)}


def test_case8_one_broadcast_between_odd_meshes() -> None:
    src = DeviceMesh.of(range(6), (2, 3))
    dst = DeviceMesh.of(range(6, 12), (3, 2))
    r = Reshard.of(SHAPE, src, "RRR", dst, "RRR")
    assert table(r.tasks) == {((ALL, ALL, (0, 512)), tuple(range(6)), tuple(range(6, 12)),
                               2 * GIB)}


def test_case9_dimension_one_halves_to_dimension_two_halves() -> None:
    r = Reshard.of(SHAPE, SRC, "RS0R", DST, "RRS0")
    q = 512 * MIB
    assert table(r.tasks) == {((ALL, HALF0, (0, 256)), A, C, q),
                              ((ALL, HALF1, (0, 256)), B, C, q),
                              ((ALL, HALF0, (256, 512)), A, D, q),
                              ((ALL, HALF1, (256, 512)), B, D, q)}


def test_devices_in_both_meshes_do_not_receive_what_they_hold() -> None:
    m = DeviceMesh.of(range(4))
    r = Reshard.of((8, 2), m, "S0R", m, "RR")  # an all-gather within one mesh
    assert len(r.tasks) == 4
    for t in r.tasks:
        assert set(t.senders) == {t.index} and set(t.receivers) == set(range(4)) - {t.index}


def test_collective_pieces_keep_every_byte() -> None:
    r = Reshard.of(SHAPE, SRC, "RS0R", DST, "S0RR")
    coll = r.collective(pieces=3)
    assert coll.n_chunks == 12 and sum(c.size for c in coll.chunks) == r.nbytes
    assert piece_sizes(10, 3) == [4, 3, 3] and piece_sizes(2, 5) == [1, 1]
    first = coll.chunks[0]
    assert first.pre == frozenset(A) and first.post == frozenset(C) and not first.reduce
    assert r.chunk_tasks(3) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_several_reshards_number_chunks_like_the_combined_collective() -> None:
    r1 = Reshard.of(SHAPE, SRC, "RS0R", DST, "S0RR")
    r2 = Reshard.of(SHAPE, SRC, "S0RR", DST, "S0RR", dtype="bf16")
    coll = reshard_collective([r1, r2], pieces=2)
    items = task_chunks([r1, r2], pieces=2)
    assert coll.kind == "multi" and coll.n_chunks == 12
    for task, ids in items:
        assert sum(coll.chunks[c].size for c in ids) == task.nbytes
        assert all(coll.chunks[c].pre == frozenset(task.senders) for c in ids)
