"""Is a collective what its declaration says?

A schedule file carries its collective twice: as a declaration (kind, group, size, chunks per
NPU, root) and as the chunks with their pre- and postconditions that the verifier checks the
transfers against.  :func:`differences` rebuilds the chunks from the declaration with
:mod:`tacos.model.patterns` (``custom`` collectives from their own chunks: the group must be the
NPUs they name, in any order, and the size their sum; multi-tenant ones tenant by tenant and then
combined as :func:`tacos.model.collective.combine` does) and lists every place where
the two disagree, so that a file whose obligations were cut down (a postcondition reduced to one
NPU, a chunk dropped, a group that no longer holds an NPU the chunks use, a wrong size or an
unknown kind) is rejected instead of verified against its own weakened terms.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model import patterns
from tacos.model.collective import STANDARD_COLLECTIVES, Collective, combine

MAX_REPORTED = 5


def expected(coll: Collective) -> Collective:
    """The collective its declaration describes; raises :class:`ValueError` if none does."""
    if coll.kind == "multi":
        if len(coll.tenants) < 2:
            raise ValueError("a multi-tenant collective has at least two tenants")
        return combine(tuple(expected(t) for t in coll.tenants))
    if coll.tenants:
        raise ValueError(f"a {coll.kind} collective has no tenants")
    if coll.kind == "custom":
        return patterns.custom([(c.pre, c.post, c.reduce, c.size) for c in coll.chunks],
                               name=coll.name)
    if coll.kind not in STANDARD_COLLECTIVES:
        raise ValueError(f"unknown collective kind {coll.kind!r} (expected one of "
                         f"{', '.join(STANDARD_COLLECTIVES)}, custom or multi)")
    if len(set(coll.group)) != len(coll.group):
        raise ValueError("the group names an NPU twice")
    try:
        return patterns.build(coll.kind, coll.group, size=coll.size,
                              chunks_per_npu=coll.chunks_per_npu, root=coll.root,
                              name=coll.name)
    except TacosError as exc:
        raise ValueError(exc.message) from None


def differences(coll: Collective, path: str = "$.collective") -> list[tuple[str, str]]:
    """``(JSON path, message)`` for each way ``coll`` differs from its declaration (at most
    :data:`MAX_REPORTED`); empty when they agree."""
    if coll.kind == "multi":
        for k, t in enumerate(coll.tenants):
            found = differences(t, f"{path}.tenants[{k}]")
            if found:
                return found
    try:
        want = expected(coll)
    except ValueError as exc:
        where = ".kind" if "kind" in str(exc) else ".group" if "group" in str(exc) else ""
        return [(path + where, str(exc))]
    what = f"{coll.kind} over {len(coll.group)} NPUs" if coll.kind not in ("custom", "multi") \
        else f"this {coll.kind} collective"
    out: list[tuple[str, str]] = []
    custom = coll.kind == "custom"
    for field in ("group", "size", "chunks_per_npu", "root"):
        have, need = getattr(coll, field), getattr(want, field)
        if custom and field == "group":  # any order of the NPUs its chunks name
            have, need = frozenset(have), frozenset(need)
            if len(coll.group) != len(have):
                out.append((f"{path}.group", "the group names an NPU twice"))
                continue
        if custom and field == "chunks_per_npu":  # free for a custom collective
            continue
        if have != need:
            out.append((f"{path}.{field}", f"{_show(have)}, but {what} has {_show(need)}"))
    if coll.n_chunks != want.n_chunks:
        out.append((f"{path}.chunks", f"{coll.n_chunks} chunks, but {what} with "
                    f"{coll.chunks_per_npu} per NPU has {want.n_chunks}"))
        return out[:MAX_REPORTED]
    for a, b in zip(coll.chunks, want.chunks, strict=True):
        for field in ("size", "pre", "post", "reduce", "index", "tenant"):
            have, need = getattr(a, field), getattr(b, field)
            if have != need:
                out.append((f"{path}.chunks[{a.id}].{field}",
                            f"{_show(have)}, but chunk {a.id} of {what} has {_show(need)}"))
                break
        if len(out) >= MAX_REPORTED:
            break
    return out[:MAX_REPORTED]


def _show(value: object) -> str:
    if isinstance(value, frozenset | tuple | list):
        items = sorted(value) if isinstance(value, frozenset) else list(value)
        text = ", ".join(str(x) for x in items[:8])
        return f"[{text}{', ...' if len(items) > 8 else ''}]"
    return repr(value)
