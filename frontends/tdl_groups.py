"""Process groups written in TDL (``group a[0], a[1], ...`` of collectives and jobs).

A group lists each NPU once: an NPU named twice, directly or through overlapping ranges, is an
error that points at the second mention and names the position of the first, instead of
being silently dropped (which would change the group's size and every per-rank chunk).
"""

from __future__ import annotations

from typing import Any

from lark import Tree


def distinct_refs(builder: Any, refs: Tree) -> list[int]:
    """The NPU keys of ``refs`` (a TDL ``refs`` list) in order; a located error when one NPU
    appears twice.  ``builder`` is the TDL builder resolving the references."""
    out: list[int] = []
    first: dict[int, Any] = {}
    for r in refs.children:
        for k in builder.ref(r):
            if k in first:
                was = builder.span(first[k])
                where = f" (first at {was.line}:{was.col})" if was is not None else ""
                raise builder.error(f"{builder.label(k)} appears twice in the group{where}", r,
                                    "name each NPU of a group once")
            first[k] = r
            out.append(k)
    return out
