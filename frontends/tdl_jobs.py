"""TDL ``job`` statements: process groups with their collectives, sharing one fabric.

::

    job "train-a" group host[0..7] priority 1 {
      collective allreduce size 256MiB
    }

A collective inside a job without its own ``group`` runs over the job's group.
:class:`JobStatements` evaluates the statement (a mixin of the builder's ``Scope``);
:func:`build_job` makes the :class:`tacos.jobs.model.Job`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lark import Tree
from tacos.frontends.tdl_values import integer

from tacos.errors import Span, TacosError
from tacos.jobs.model import Job
from tacos.model.collective import Collective


@dataclass
class JobDecl:
    """A ``job`` statement: name, group (node keys), priority and collective declarations."""

    name: str
    span: Span | None
    group: list[int] = field(default_factory=list)
    priority: int = 0
    collectives: list[Any] = field(default_factory=list)


class JobStatements:
    """``do_job_stmt`` for the builder's Scope (reuses its collective statements)."""

    state: Any
    env: dict[str, Any]
    span: Callable[[Any], Span | None]
    error: Callable[..., TacosError]
    refs: Callable[[Tree], list[int]]
    label: Callable[[int], str]
    do_coll_stmt: Callable[[Tree], None]
    do_custom_stmt: Callable[[Tree], None]

    def do_job_stmt(self, t: Tree) -> None:
        decl = JobDecl(str(t.children[0])[1:-1], self.span(t))
        if any(j.name == decl.name for j in self.state.jobs):
            raise self.error(f"a job named {decl.name!r} is already declared", t.children[0],
                             "give each job its own name")
        body = []
        for item in t.children[1:]:
            if item.data == "group_opt":
                from tacos.frontends.tdl_groups import distinct_refs

                decl.group = distinct_refs(self, item.children[0])
                if any(k < 0 for k in decl.group):
                    raise self.error("a job's group holds NPUs, not switches", item)
            elif item.data == "priority_opt":
                decl.priority = integer(item.children[0], self.env, "a priority")
                if decl.priority < 0:
                    raise self.error("a priority is 0 or more (larger is more important)",
                                     item)
            else:
                body.append(item)
        if not decl.group:
            raise self.error(f"job {decl.name!r} has no group", t,
                             "add  group NPUS  after the job's name")
        members = set(decl.group)
        saved = self.state.collectives
        self.state.collectives = []
        try:
            for item in body:
                getattr(self, f"do_{item.data}")(item)
                c = self.state.collectives[-1]
                if c.group is None and c.kind != "custom":
                    c.group = list(decl.group)
                used = list(c.group or []) + ([c.root] if c.root is not None else [])
                used += [v for pre, post, *_ in c.custom for v in pre + post]
                outside = [k for k in used if k not in members]
                if outside:
                    raise self.error(f"job {decl.name!r}: this collective uses "
                                     f"{self.label(outside[0])}, which is not in the job's "
                                     "group", item, "a job's collectives run on its own NPUs")
            decl.collectives = self.state.collectives
        finally:
            self.state.collectives = saved
        if not decl.collectives:
            raise self.error(f"job {decl.name!r} runs no collective", t,
                             "add one inside the braces, e.g.  collective allreduce size 64MiB")
        for other in self.state.jobs:
            shared = [k for k in decl.group if k in set(other.group)]
            if shared:
                names = ", ".join(self.label(k) for k in shared[:4])
                more = f" and {len(shared) - 4} more" if len(shared) > 4 else ""
                raise self.error(f"job {decl.name!r} shares {names}{more} with job "
                                 f"{other.name!r}", t,
                                 "jobs own disjoint NPUs; they share only the fabric")
        self.state.jobs.append(decl)


def build_job(decl: JobDecl, collectives: list[Collective], node_id: Callable[[int], int]
              ) -> Job:
    """The :class:`Job` of a declaration whose collectives are already built."""
    return Job(decl.name, tuple(node_id(k) for k in decl.group), tuple(collectives),
               decl.priority, decl.span)


__all__ = ["JobDecl", "JobStatements", "build_job"]
