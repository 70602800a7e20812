"""TDL ``reshard`` statements: a tensor sent from one device mesh to another.

::

    reshard "act" tensor [1024, 1024, 512] dtype f32 \\
        from node[0..1].gpu[*] shape [2, 4] spec S0RR \\
        to   node[2..3].gpu[*] shape [2, 4] spec RS0R  pieces 16  relays all

:class:`ReshardStatements` evaluates the statement (a mixin of the builder's ``Scope``);
:func:`build_reshard` turns the declaration into a :class:`tacos.reshard.tasks.Reshard`, with
every mistake located at the token it concerns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

from lark import Token, Tree
from tacos.frontends.tdl_values import integer

from tacos import limits
from tacos.errors import Span, TacosError
from tacos.reshard.sharding import DeviceMesh, ShardingError, ShardingSpec
from tacos.reshard.tasks import DTYPES, Reshard


@dataclass
class MeshSide:
    """One side of a reshard: its NPU keys, optional shape, and spec text, with spans."""

    devices: list[int]
    span: Span | None
    shape: list[int] | None = None
    shape_span: Span | None = None
    spec: str = ""
    spec_span: Span | None = None


@dataclass
class ReshardDecl:
    """A ``reshard`` statement with its references resolved."""

    name: str
    span: Span | None
    shape: list[int] = field(default_factory=list)
    shape_span: Span | None = None
    dtype: str | int = "f32"
    dtype_span: Span | None = None
    pieces: int | None = None
    relays: str | None = None
    src: MeshSide | None = None
    dst: MeshSide | None = None


class ReshardStatements:
    """``do_reshard_stmt`` for the builder's Scope (uses its ``refs``, ``span``, ``error``)."""

    state: Any
    env: dict[str, Any]
    span: Callable[[Any], Span | None]
    error: Callable[..., TacosError]
    refs: Callable[[Tree], list[int]]

    def int_list(self, t: Tree, what: str) -> list[int]:
        return [integer(c, self.env, what) for c in t.children]

    def mesh_side(self, t: Tree) -> MeshSide:
        kids = list(t.children)
        side = MeshSide(self.refs(kids[0]), self.span(kids[0]))
        if any(key < 0 for key in side.devices):
            raise self.error("a device mesh holds NPUs, not switches", kids[0])
        for k in kids[1:]:
            if isinstance(k, Tree) and k.data == "mesh_shape":
                side.shape = self.int_list(k.children[0], "a mesh size")
                side.shape_span = self.span(k)
            else:
                text = str(k)
                side.spec = text[1:-1] if isinstance(k, Token) and k.type == "STRING" else text
                side.spec_span = self.span(k)
        return side

    def do_reshard_stmt(self, t: Tree) -> None:
        items = list(t.children)
        name = ""
        if items and isinstance(items[0], Token) and items[0].type == "STRING":
            name, items = str(items[0])[1:-1], items[1:]
        decl = ReshardDecl(name, self.span(t))
        decl.shape = self.int_list(items[0], "a tensor length")
        decl.shape_span = self.span(items[0])
        for it in items[1:]:
            if it.data == "reshard_from":
                decl.src = self.mesh_side(it)
            elif it.data == "reshard_to":
                decl.dst = self.mesh_side(it)
            elif it.data == "dtype_opt":
                tok = it.children[0]
                decl.dtype = int(str(tok)) if tok.type == "NUMBER" else str(tok)
                decl.dtype_span = self.span(tok)
                if isinstance(decl.dtype, str) and decl.dtype not in DTYPES:
                    raise self.error(f"unknown dtype {decl.dtype!r}", tok,
                                     f"use one of {', '.join(DTYPES)} or a byte count")
            elif it.data == "relays_opt":
                decl.relays = str(it.children[0])
                if decl.relays not in ("members", "all"):
                    raise self.error(f"unknown relays {decl.relays!r}", it.children[0],
                                     "relays members (only the meshes' NPUs forward data, "
                                     "the default) or relays all (every NPU may)")
            elif it.data == "pieces_opt":
                decl.pieces = integer(it.children[0], self.env, "pieces")
                if decl.pieces < 1:
                    raise self.error("pieces per tile must be at least 1", it)
                if decl.pieces > limits.current().chunks:  # each piece of a tile is a chunk
                    exc = limits.exceeded("chunks", decl.pieces, "pieces per tile")
                    raise self.error(exc.message, it, exc.hint)
        self.state.reshards.append(decl)


def build_reshard(decl: ReshardDecl, failed: set[int], label: Callable[[int], str],
                  node_id: Callable[[int], int],
                  error: Callable[[str, Span | None, str | None], TacosError]) -> Reshard:
    """The :class:`Reshard` of a declaration; each mistake is located at its token."""
    assert decl.src is not None and decl.dst is not None

    def mesh(side: MeshSide, role: str) -> DeviceMesh:
        for k in side.devices:
            if k in failed:
                raise error(f"{label(k)} has failed; it cannot be in the {role} mesh", side.span,
                            "remove it from the mesh or remove the failure")
        devices = [node_id(k) for k in side.devices]
        try:
            return DeviceMesh.of(devices, side.shape, role)
        except ShardingError as exc:
            raise error(exc.message, side.shape_span or side.span, exc.hint) from None

    def spec(side: MeshSide) -> ShardingSpec:
        try:
            return ShardingSpec.parse(side.spec)
        except ShardingError as exc:
            raise error(exc.message, side.spec_span, exc.hint) from None

    src, dst = mesh(decl.src, "source"), mesh(decl.dst, "destination")
    src_spec, dst_spec = spec(decl.src), spec(decl.dst)
    for side, m, s, role in ((decl.src, src, src_spec, "source"),
                             (decl.dst, dst, dst_spec, "destination")):
        try:
            s.check(m, decl.shape, role)
        except ShardingError as exc:
            raise error(exc.message, side.spec_span, exc.hint) from None
    try:
        made = Reshard.of(decl.shape, src, src_spec, dst, dst_spec, dtype=decl.dtype,
                          name=decl.name)
    except ShardingError as exc:
        raise error(exc.message, decl.shape_span, exc.hint) from None
    problem = limits.check_number("size", prod(made.shape) * made.element_bytes)
    if problem is not None:
        raise error(f"the tensor: {problem}", decl.shape_span, None)
    return replace(made, span=decl.span, pieces=decl.pieces, relays=decl.relays)


__all__ = ["MeshSide", "ReshardDecl", "ReshardStatements", "build_reshard"]
