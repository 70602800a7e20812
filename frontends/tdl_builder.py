"""TDL tree → Spec: evaluates statements, resolves names and builds the IR."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from itertools import product
from math import prod
from pathlib import Path
from typing import Any

from lark import Token, Tree
from tacos.frontends.tdl_includes import IncludePolicy, read_included
from tacos.frontends.tdl_jobs import JobDecl, JobStatements
from tacos.frontends.tdl_names import Group, Namespace, flat_indices, index_label
from tacos.frontends.tdl_parser import STATEMENT_FORMS, parse_tree
from tacos.frontends.tdl_reshard import ReshardDecl, ReshardStatements
from tacos.frontends.tdl_values import (
    LinkProps,
    Quantity,
    ValueError_,
    expr,
    integer,
    link_props,
    quantity,
)

from tacos import limits
from tacos.errors import InputFileError, Span, TacosError, TdlSemanticError
from tacos.model import generators as gen
from tacos.model.topology import SWITCH_CAPABILITIES, UNWIND_POLICIES
from tacos.model.units import parse_size


@dataclass
class LinkDecl:
    """A declared directed link between node keys."""

    src: int
    dst: int
    props: LinkProps
    span: Span | None


@dataclass
class CollectiveDecl:
    """A collective statement with its references already resolved to node keys."""

    kind: str
    span: Span | None
    group: list[int] | None = None
    root: int | None = None
    size: int | None = None
    size_span: Span | None = None
    chunks: int = 1
    name: str = ""
    custom: list[tuple[list[int], list[int], bool, int, Span | None]] = field(default_factory=list)
    deliveries: int = 0


@dataclass
class State:
    """Everything declared so far, shared by a file and the files it uses."""

    npus: list[tuple[str, Span | None]] = field(default_factory=list)
    switches: list[tuple[str, Span | None, str, int | None, frozenset[str]]] = field(
        default_factory=list)
    links: dict[tuple[int, int], LinkDecl] = field(default_factory=dict)
    failed_npus: dict[int, Span | None] = field(default_factory=dict)
    failed_links: dict[tuple[int, int], Span | None] = field(default_factory=dict)
    collectives: list[CollectiveDecl] = field(default_factory=list)
    reshards: list[ReshardDecl] = field(default_factory=list)
    jobs: list[JobDecl] = field(default_factory=list)
    name: str = ""
    hardware: str = ""
    hardware_depth: int = -1  # nesting depth of the file that set ``hardware`` (-1: none)
    texts: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    includes: IncludePolicy | None = None
    parsed: dict[tuple[str, str, str], tuple[str, str, Tree]] = field(default_factory=dict)
    iterations: int = 0  # loop iterations run so far (limit loop_iterations)
    instances: int = 0  # file instances created by `use` so far (limit includes)
    blocks: int = 0  # blocks and file instances currently open (limit nesting)


class Scope(ReshardStatements, JobStatements):
    """One file instance being evaluated: its text, names, values and defaults."""

    def __init__(self, state: State, source: str, text: str, ns: Namespace, prefix: str,
                 env: dict[str, Any], depth: int) -> None:
        self.state, self.source, self.text = state, source, text
        self.ns, self.prefix, self.env, self.depth = ns, prefix, env, depth
        self.defaults = LinkProps()
        self.defined: dict[str, Span | None] = {}  # names set by let/param, for duplicates
        state.texts[source] = text

    # -- errors ------------------------------------------------------------------------------
    def span(self, where: Any) -> Span | None:
        """Source span of a tree or token."""
        if isinstance(where, Token) and where.line is not None:
            return Span(self.source, where.line, where.column, where.end_line, where.end_column)
        if isinstance(where, Tree) and not where.meta.empty:
            m = where.meta
            return Span(self.source, m.line, m.column, m.end_line, m.end_column)
        return None

    def error(self, message: str, where: Any, hint: str | None = None) -> TdlSemanticError:
        """A semantic error located at ``where``."""
        span = self.span(where)
        line = None
        if span is not None:
            lines = self.text.splitlines()
            line = lines[span.line - 1] if span.line <= len(lines) else None
        return TdlSemanticError(message, span=span, hint=hint, source_line=line)

    # -- statements --------------------------------------------------------------------------
    def run(self, stmts: list[Tree]) -> None:
        """Evaluate statements in order."""
        for stmt in stmts:
            try:
                getattr(self, f"do_{stmt.data}")(stmt)
            except ValueError_ as exc:
                raise self.error(exc.message, exc.where, exc.hint) from None
            except gen.GeneratorError as exc:
                raise self.error(str(exc), stmt) from None

    def do_topology_stmt(self, t: Tree) -> None:
        if not self.state.name:  # the outermost file names the system
            self.state.name = str(t.children[0])[1:-1]

    def do_hardware_stmt(self, t: Tree) -> None:
        """``hardware "h100"``: the GPU generation of the runtime model; the outermost file's
        statement wins over the files it uses."""
        from tacos.runtime.hardware import generations

        gen = str(t.children[0])[1:-1].lower()
        if gen not in generations():
            raise self.error(f"unknown hardware generation {gen!r}", t.children[0],
                             f"known generations: {', '.join(generations())}")
        st = self.state
        if st.hardware_depth < 0 or self.depth <= st.hardware_depth:
            st.hardware, st.hardware_depth = gen, self.depth

    def value(self, node: Any) -> Any:
        if isinstance(node, Token) and node.type == "STRING":
            return str(node)[1:-1]
        if isinstance(node, Tree) and node.data == "value_var":
            return quantity(Tree("quantity_var", node.children, node.meta), self.env)
        if isinstance(node, Tree) and node.data == "unit_quantity":
            return quantity(Tree("quantity", node.children, node.meta), self.env)
        return expr(node, self.env)

    def define(self, t: Tree, what: str) -> str:
        """The name a let/param statement sets, refusing a name already set in this file."""
        name = str(t.children[0])
        if name in self.defined:
            prev = self.defined[name]
            raise self.error(
                f"{name!r} is already defined" + (f" at {prev}" if prev else ""),
                t.children[0],
                f"a name is set once per file; pick another name for this {what}"
                + (", or set the parameter from outside: --param NAME=VALUE or "
                   "use ...(NAME=VALUE)" if what == "param" else ""))
        self.defined[name] = self.span(t.children[0])
        return name

    def do_param_stmt(self, t: Tree) -> None:
        name = self.define(t, "param")
        if name not in self.env:  # a value passed by `use ...(name=...)` wins
            self.env[name] = self.value(t.children[1])
        if self.depth == 0:
            self.state.params[name] = self.env[name]

    def do_let_stmt(self, t: Tree) -> None:
        self.env[self.define(t, "let")] = self.value(t.children[1])

    def do_default_stmt(self, t: Tree) -> None:
        props = link_props(t.children, self.env)
        if props.bandwidth is not None:
            self.defaults.bandwidth = props.bandwidth
        if props.latency is not None:
            self.defaults.latency = props.latency

    def declare(self, decl: Tree, make: Any, instances: bool = False) -> Group:
        """Declare ``NAME`` or ``NAME[d0, d1, ...]``; ``make(label)`` creates one member.

        Members are nodes (limit ``nodes``), or file instances when ``instances``
        (limit ``includes``); the limit is checked before any member is made.
        """
        name = str(decl.children[0])
        if name in self.ns.groups:
            prev = self.ns.groups[name].span
            raise self.error(f"{name!r} is already declared", decl.children[0],
                             f"first declared at {prev}" if prev else None)
        shape = tuple(integer(c, self.env, "a size") for c in decl.children[1:])
        for n in shape:
            if n < 1:
                raise self.error(f"{name!r} needs a positive size, not {n}", decl)
        count = prod(shape) if shape else 1
        if instances:
            self.check_limit("includes", self.state.instances + count,
                             f"{name!r} makes too many file instances", decl)
            self.state.instances += count
        else:
            self.check_limit("nodes", self.n_nodes + count, f"{name!r} makes too many nodes "
                             "(NPUs and switches)", decl)
        members = [make(f"{self.prefix}{name}{index_label(shape, i)}") for i in range(count)]
        group = Group(name, shape, members, self.span(decl))
        self.ns.groups[name] = group
        return group

    @property
    def n_nodes(self) -> int:
        """NPUs and switches declared so far."""
        return len(self.state.npus) + len(self.state.switches)

    def check_limit(self, name: str, amount: int, what: str, where: Any) -> None:
        """A located :class:`~tacos.limits.LimitError` when ``amount`` is over limit ``name``."""
        if amount > getattr(limits.current(), name):
            exc = limits.exceeded(name, amount, what)
            located = self.error(exc.message, where, exc.hint)
            raise limits.LimitError(located.message, span=located.span, hint=located.hint,
                                    source_line=located.source_line)

    def new_npu(self, label: str, span: Span | None = None) -> int:
        self.state.npus.append((label, span))
        return len(self.state.npus) - 1

    def new_switch(self, label: str, span: Span | None, policy: str = "full",
                   degree: int | None = None, caps: frozenset[str] = frozenset()) -> int:
        self.state.switches.append((label, span, policy, degree, caps))
        return -len(self.state.switches)

    def capabilities(self, t: Tree) -> frozenset[str]:
        """``with multicast, reduce`` → the switch capabilities (each one known, once)."""
        out: set[str] = set()
        for c in t.children:
            name = str(c.children[0])
            if name not in SWITCH_CAPABILITIES:
                close = difflib.get_close_matches(name, SWITCH_CAPABILITIES, n=1)
                raise self.error(f"unknown switch capability {name!r}", c,
                                 f"did you mean '{close[0]}'?" if close
                                 else f"use {' and/or '.join(SWITCH_CAPABILITIES)}")
            if name in out:
                raise self.error(f"switch capability {name!r} is given twice", c)
            out.add(name)
        return frozenset(out)

    def do_npu_stmt(self, t: Tree) -> None:
        for decl in t.children:
            self.declare(decl, lambda label, d=decl: self.new_npu(label, self.span(d)))

    def policy(self, t: Tree) -> tuple[str, int | None]:
        name = str(t.children[0])
        if name not in UNWIND_POLICIES:
            close = difflib.get_close_matches(name, UNWIND_POLICIES, n=1)
            raise self.error(f"unknown unwinding policy {name!r}", t.children[0],
                             f"did you mean '{close[0]}'?" if close
                             else f"use one of {', '.join(UNWIND_POLICIES)}")
        degree = None
        if len(t.children) > 1:
            if name not in ("degree", "stride"):
                raise self.error(f"policy {name!r} takes no argument", t.children[1])
            degree = integer(t.children[1], self.env, name)
            if degree < 1:
                raise self.error(f"the unwinding {name} must be at least 1", t.children[1])
        elif name in ("degree", "stride"):
            raise self.error(f"policy {name!r} needs an argument, e.g. {name}(2)", t)
        return name, degree

    def do_switch_stmt(self, t: Tree) -> None:
        decl, opts = t.children[0], t.children[1:]
        policy, degree = "full", None
        caps: frozenset[str] = frozenset()
        for o in opts:
            if o.data == "unwind_opt":
                policy, degree = self.policy(o)
            elif o.data == "caps_opt":
                caps = self.capabilities(o)
        group = self.declare(
            decl, lambda label: self.new_switch(label, self.span(decl), policy, degree, caps))
        for o in opts:
            if o.data == "attach_opt":
                npus = self.refs(o.children[0])
                props = self.props(o.children[1:], o)
                self.check_limit("links", len(self.state.links)
                                 + 2 * len(npus) * len(group.members),
                                 "attaching these NPUs makes too many links", o)
                for sw in group.members:
                    for n in npus:
                        self.add_link(n, sw, props, o)
                        self.add_link(sw, n, props, o)

    def props(self, items: list[Tree], where: Any) -> LinkProps:
        p = link_props(items, self.env)
        if p.bandwidth is None:
            p.bandwidth = self.defaults.bandwidth
        if p.latency is None:
            p.latency = self.defaults.latency if self.defaults.latency is not None else 0.0
        if p.bandwidth is None:
            raise self.error("link has no bandwidth", where,
                             "add one, e.g. 50GB/s, or set  default 50GB/s  earlier in the file")
        return p

    def add_link(self, src: int, dst: int, props: LinkProps, where: Any) -> None:
        key = (src, dst)
        if len(self.state.links) >= limits.current().links:
            self.check_limit("links", len(self.state.links) + 1, "too many links", where)
        if key in self.state.links:
            prev = self.state.links[key].span
            raise self.error(
                f"duplicate link {self.label(src)} -> {self.label(dst)}", where,
                (f"first declared at {prev}; " if prev else "")
                + "write parallel links once with a multiplicity such as x2")
        self.state.links[key] = LinkDecl(src, dst, props, self.span(where))

    def label(self, key: int) -> str:
        return self.state.npus[key][0] if key >= 0 else self.state.switches[-key - 1][0]

    def do_link_stmt(self, t: Tree) -> None:
        srcs, arrow, dsts = self.refs(t.children[0]), str(t.children[1]), self.refs(t.children[2])
        props = self.props(t.children[3:], t)
        if len(srcs) == 1 and srcs == dsts:
            raise self.error(f"self link: {self.label(srcs[0])} -> itself", t,
                             "a link joins two different nodes")
        self.check_limit("links", len(self.state.links) + len(srcs) * len(dsts)
                         * (2 if arrow == "<->" else 1),
                         f"this statement links {len(srcs):,} x {len(dsts):,} nodes: too many "
                         "links", t)
        for s, d in product(srcs, dsts):
            if s != d:
                self.add_link(s, d, props, t)
                if arrow == "<->":
                    self.add_link(d, s, props, t)

    # -- generators --------------------------------------------------------------------------
    def do_gen_stmt(self, t: Tree) -> None:
        kind, decl, args = str(t.children[0]), t.children[1], t.children[2:]
        shape = tuple(integer(c, self.env, "a size") for c in decl.children[1:])
        options: dict[str, int] = {}
        policy, degree = "full", None
        common: list[Tree] = []
        labelled: dict[str, list[Tree]] = {}
        tag = ""
        caps: frozenset[str] | None = None
        for a in args:
            if a.data == "caps_opt":
                caps = self.capabilities(a)
            elif a.data == "option":
                options[str(a.children[0])] = integer(a.children[1], self.env, str(a.children[0]))
            elif a.data == "labelled":
                labelled[str(a.children[0])] = a.children[1:]
            elif a.data == "unwind_opt":
                policy, degree = self.policy(a)
            elif a.data == "tag_opt":
                tag = str(a.children[0])
            else:
                common.append(a)
        need = {"ring": 1, "biring": 1, "fullyconnected": 1, "hypercube": 1, "star": 1,
                "fattree": 1, "dragonfly": 2}
        if kind in need and len(shape) != need[kind]:
            raise self.error(f"{kind} takes {need[kind]} size(s) in brackets, got {len(shape)}",
                             decl, STATEMENT_FORMS.get(kind))
        self.check_generated(kind, shape, options, decl)
        if kind in ("mesh", "torus"):
            pattern = gen.grid(shape, wrap=kind == "torus")
        elif kind in ("ring", "biring"):
            pattern = gen.ring(shape[0], bidirectional=kind == "biring")
        elif kind == "fullyconnected":
            pattern = gen.fully_connected(shape[0])
        elif kind == "hypercube":
            pattern = gen.hypercube(shape[0])
        elif kind == "star":
            pattern = gen.star(shape[0])
        elif kind == "dragonfly":
            pattern = gen.dragonfly(shape[0], shape[1])
        else:
            unknown = set(options) - {"leaves", "spines"}
            if unknown or "leaves" not in options or "spines" not in options:
                raise self.error("fattree needs leaves=L and spines=S", t,
                                 STATEMENT_FORMS.get("fattree"))
            pattern = gen.fat_tree(shape[0], options["leaves"], options["spines"])
        if kind != "fattree" and options:
            raise self.error(f"{kind} takes no option {next(iter(options))!r}", t)
        if caps is not None and not pattern.switch_groups:
            raise self.error(f"{kind} creates no switch to give capabilities to", t,
                             "switch capabilities go on star, fattree and dims Switch(n)")
        self.instantiate(t, decl, pattern, common, labelled, policy, degree, tag,
                         caps=caps or frozenset())

    def check_generated(self, kind: str, shape: tuple[int, ...], options: dict[Any, int],
                        where: Tree) -> None:
        """Node and link limits for a generator, checked before the generator runs."""
        nodes, links = gen.size_of(kind, shape, options)
        self.check_limit("nodes", self.n_nodes + nodes,
                         f"{kind} {list(shape)} makes too many nodes (NPUs and switches)", where)
        self.check_limit("links", len(self.state.links) + links,
                         f"{kind} {list(shape)} makes too many links", where)

    def instantiate(self, t: Tree, decl: Tree, pattern: gen.Pattern, common: list[Tree],
                    labelled: dict[str, list[Tree]], policy: str, degree: int | None,
                    tag: str, per_label: dict[str, list[Tree]] | None = None,
                    tags: dict[str, str] | None = None,
                    caps: frozenset[str] = frozenset()) -> None:
        """Create a pattern's NPUs, switches (with capabilities ``caps``) and links with
        their properties."""
        for lab in labelled:
            if lab not in pattern.labels:
                raise self.error(f"unknown link class {lab!r}", t,
                                 f"this generator's link classes: {', '.join(pattern.labels)}")
        name = str(decl.children[0])
        fake = Tree("decl", [decl.children[0]] + [Tree("num", [Token("NUMBER", str(n))])
                                                  for n in pattern.shape], decl.meta)
        group = self.declare(fake, lambda label: self.new_npu(label, self.span(decl)))
        keys = list(group.members)
        for suffix, count in pattern.switch_groups:
            sdecl = Tree("decl", [Token("NAME", f"{name}_{suffix}"),
                                  Tree("num", [Token("NUMBER", str(count))])], decl.meta)
            sg = self.declare(sdecl, lambda label: self.new_switch(
                label, self.span(decl), policy, degree, caps))
            keys.extend(sg.members)
        props: dict[str, LinkProps] = {}
        for lab in pattern.labels:
            items = (per_label or {}).get(lab) or labelled.get(lab) or common
            props[lab] = self.props(items, t)
            if tag and not props[lab].tag:
                props[lab].tag = tag
        for u, v, lab, dim in pattern.links:
            p = props[lab]
            if p.dim is None and dim is not None:
                p = LinkProps(p.bandwidth, p.latency, p.multiplicity,
                              p.tag or (tags or {}).get(lab, lab), dim)
            self.add_link(keys[u], keys[v], p, t)

    def do_dims_stmt(self, t: Tree) -> None:
        name, spec = t.children[0], str(t.children[1])
        rest = t.children[2:]
        policy, degree = "full", None
        caps: frozenset[str] = frozenset()
        if rest and rest[-1].data == "caps_opt":
            caps = self.capabilities(rest[-1])
            rest = rest[:-1]
        if rest and rest[-1].data == "unwind_opt":
            policy, degree = self.policy(rest[-1])
            rest = rest[:-1]
        try:
            kinds = gen.parse_dimspec(spec)
        except gen.GeneratorError as exc:
            raise self.error(str(exc), t.children[1]) from None
        dims = []
        for kind, size_text in kinds:
            env_tree = Tree("var", [Token("NAME", size_text)]) if not size_text.isdigit() \
                else Tree("num", [Token("NUMBER", size_text)])
            try:
                dims.append((kind, integer(env_tree, self.env, "a dimension size")))
            except ValueError_ as exc:
                raise self.error(exc.message, t.children[1], exc.hint) from None
        if len(rest) not in (1, len(dims)):
            raise self.error(
                f"{len(dims)} dimensions need {len(dims)} bandwidth/latency groups "
                f"(separated by commas), got {len(rest)}", t, STATEMENT_FORMS.get("dims"))
        forms = {k: {"Switch": 1, "FullyConnected": 2}.get(kind, 0)
                 for k, (kind, _) in enumerate(dims)}
        self.check_generated("dims", tuple(n for _, n in dims), forms, t)
        pattern = gen.multi_dim(dims)
        per_label = {f"d{k}": (rest[k] if len(rest) > 1 else rest[0]).children
                     for k in range(len(dims))}
        decl = Tree("decl", [name], t.meta)
        tags = {f"d{k}": kind for k, (kind, _) in enumerate(dims)}
        if caps and not pattern.switch_groups:
            raise self.error("these dimensions create no switch to give capabilities to", t,
                             "add a Switch(n) dimension")
        self.instantiate(t, decl, pattern, [], {}, policy, degree, "", per_label, tags,
                         caps=caps)

    # -- composition -------------------------------------------------------------------------
    def do_use_stmt(self, t: Tree) -> None:
        target = t.children[0]
        args: dict[str, Any] = {}
        decl = None
        for c in t.children[1:]:
            if isinstance(c, Tree) and c.data == "use_args":
                for a in c.children:
                    args[str(a.children[0])] = self.value(a.children[1])
            elif isinstance(c, Tree) and c.data == "decl":
                decl = c
        if self.depth >= limits.current().include_depth:
            raise self.error(f"files use each other more than "
                             f"{limits.current().include_depth} levels deep (a cycle?)", t,
                             "raise the limit with --limit include_depth=N if this is intended")
        if decl is None:
            self.check_limit("includes", self.state.instances + 1,
                             "too many file instances", t)
            self.state.instances += 1
        source, text, tree = self.locate(target)
        declared = {str(s.children[0]) for s in tree.children
                    if isinstance(s, Tree) and s.data == "param_stmt"}
        for a in args:
            if a not in declared:
                raise self.error(
                    f"{source} has no parameter {a!r}", t,
                    f"its parameters: {', '.join(sorted(declared))}" if declared
                    else f"{source} declares no parameters")
        if decl is None:
            child = Scope(self.state, source, text, self.ns, self.prefix, dict(args),
                          self.depth + 1)
            with self.block(t):
                child.run(tree.children)
            return

        def make(label: str) -> Namespace:
            ns = Namespace()
            with self.block(t):
                Scope(self.state, source, text, ns, label + ".", dict(args), self.depth + 1) \
                    .run(tree.children)
            return ns

        self.declare(decl, make, instances=True)

    def locate(self, target: Token) -> tuple[str, str, Tree]:
        """The source name, text and tree of a ``use``d preset (NAME) or file ("path").

        Each file is read and parsed once per run, however many instances use it.
        """
        key = (target.type, str(target), self.source)
        if key not in self.state.parsed:
            source, text = self.find(target)
            self.state.parsed[key] = (source, text, parse_tree(text, source))
        return self.state.parsed[key]

    def find(self, target: Token) -> tuple[str, str]:
        """Find and read a ``use``d preset (NAME) or file ("path")."""
        if target.type == "STRING":
            rel = str(target)[1:-1]
            policy = self.state.includes or IncludePolicy.for_source(self.source)
            path, why = policy.locate(rel, self.source)
            if why == "not found":
                raise self.error(f"cannot find {rel!r}", target,
                                 f"paths are relative to {path.parent}")
            if why is not None:
                raise self.error(f"cannot use {rel!r}: {why}", target,
                                 "files may be used from " + policy.describe()
                                 + "; allow another folder with --include-dir DIR (tacosc) or "
                                 "include_dirs=[DIR] (tacos.load)"
                                 if why.startswith("outside") else
                                 "use reads TDL files only (name them *.tdl)")
            try:
                return str(path), read_included(path)
            except InputFileError as exc:
                raise self.error(exc.message, target, exc.hint) from None
        name = str(target)
        files = resources.files("tacos") / "presets"
        preset = files / f"{name}.tdl"
        if not preset.is_file():
            names = sorted(p.name[:-4] for p in files.iterdir() if p.name.endswith(".tdl"))
            close = difflib.get_close_matches(name, names, n=1)
            raise self.error(f"unknown preset {name!r}", target,
                             f"did you mean '{close[0]}'?" if close
                             else f"presets: {', '.join(names)}")
        return f"<preset {name}>", preset.read_text(encoding="utf-8")

    # -- failures ----------------------------------------------------------------------------
    def do_fail_npu_stmt(self, t: Tree) -> None:
        for k in self.refs(t.children[0]):
            if k < 0:
                raise self.error(f"{self.label(k)} is a switch; only NPUs and links can fail",
                                 t, "fail the switch's links instead")
            self.state.failed_npus[k] = self.span(t)

    def do_fail_link_stmt(self, t: Tree) -> None:
        srcs, arrow, dsts = self.refs(t.children[0]), str(t.children[1]), self.refs(t.children[2])
        for s, d in product(srcs, dsts):
            pairs = [(s, d), (d, s)] if arrow == "<->" else [(s, d)]
            for a, b in pairs:
                if (a, b) not in self.state.links:
                    raise self.error(f"no link {self.label(a)} -> {self.label(b)} to fail", t,
                                     "declare the link before failing it")
                self.state.failed_links[(a, b)] = self.span(t)

    # -- collectives -------------------------------------------------------------------------
    def do_coll_stmt(self, t: Tree) -> None:
        decl = CollectiveDecl(str(t.children[0]), self.span(t))
        for o in t.children[1:]:
            if o.data == "root_opt":
                roots = self.refs(Tree("refs", [o.children[0]], o.meta))
                if len(roots) != 1:
                    raise self.error("a root is a single NPU", o)
                decl.root = roots[0]
            elif o.data == "group_opt":
                from tacos.frontends.tdl_groups import distinct_refs

                decl.group = distinct_refs(self, o.children[0])
            elif o.data == "size_opt":
                decl.size = self.size(o.children[0])
                decl.size_span = self.span(o)
            elif o.data == "chunks_opt":
                decl.chunks = integer(o.children[0], self.env, "chunks")
                if decl.chunks < 1:
                    raise self.error("chunks per NPU must be at least 1", o)
            elif o.data == "name_opt":
                decl.name = str(o.children[0])[1:-1]
        for k in (decl.group or []) + ([decl.root] if decl.root is not None else []):
            if k < 0:
                raise self.error(f"{self.label(k)} is a switch; collectives run on NPUs", t)
        self.state.collectives.append(decl)

    def size(self, node: Tree) -> int:
        q = quantity(node, self.env)
        if q.kind not in (None, "size"):
            raise self.error(f"a size needs a size unit (B, KiB, MiB, ...), not {q.unit}", node)
        try:
            nbytes = parse_size(q.value)
        except TacosError as exc:
            raise self.error(exc.message, node, exc.hint) from None
        if nbytes < 1:
            raise self.error("a size must be at least 1 byte", node)
        problem = limits.check_number("size", nbytes)
        if problem is not None:
            raise self.error(problem, node)
        return nbytes

    def do_custom_stmt(self, t: Tree) -> None:
        name = ""
        items = t.children
        if items and isinstance(items[0], Token) and items[0].type == "STRING":
            name, items = str(items[0])[1:-1], items[1:]
        decl = CollectiveDecl("custom", self.span(t), name=name)
        self.chunk_items(items, decl)
        if not decl.custom:
            raise self.error("a custom collective needs at least one chunk", t,
                             "add  chunk from NPUS to NPUS [size SIZE]")
        self.state.collectives.append(decl)

    def chunk_items(self, items: list[Tree], decl: CollectiveDecl) -> None:
        for it in items:
            if it.data == "chunk_for":
                with self.block(it):
                    for env, defined in self.loop_envs(it.children[0]):
                        saved = self.env, self.defined
                        self.env, self.defined = env, defined
                        try:
                            self.chunk_items(it.children[1:], decl)
                        finally:
                            self.env, self.defined = saved
                continue
            kids = list(it.children)
            reduce = bool(kids) and isinstance(kids[0], Token) and kids[0].type == "REDUCE"
            if reduce:
                kids = kids[1:]
            pre, post = self.refs(kids[0]), self.refs(kids[1])
            size, count = 1 << 20, 1
            for extra in kids[2:]:
                if extra.data in ("quantity", "quantity_var"):
                    size = self.size(extra)
                else:
                    count = integer(extra, self.env, "count")
                    if count < 1:
                        raise self.error(f"count must be at least 1, not {count}", extra)
            for k in pre + post:
                if k < 0:
                    raise self.error(f"{self.label(k)} is a switch; chunks live on NPUs", it)
            self.check_limit("chunks", len(decl.custom) + count,
                             "this custom collective has too many chunks", it)
            self.check_limit("deliveries", decl.deliveries + count * len(post),
                             "this custom collective demands too many chunk arrivals", it)
            decl.deliveries += count * len(post)
            span = self.span(it)
            decl.custom.extend([(pre, post, reduce, size, span)] * count)

    # -- loops -------------------------------------------------------------------------------
    def loop_envs(self, loop_vars: Tree) -> Iterator[tuple[dict[str, Any], dict]]:
        """Environments of a loop's iterations, made one at a time.

        The iteration count (every combination of the loop variables) is checked against the
        ``loop_iterations`` limit, all loops of the run together, before the first iteration.
        """
        ranges = []
        for lv in loop_vars.children:
            lo = integer(lv.children[1], self.env, "a range bound")
            hi = integer(lv.children[2], self.env, "a range bound")
            ranges.append((str(lv.children[0]), range(lo, hi + 1)))
        count = prod(len(r) for _, r in ranges)
        self.check_limit("loop_iterations", self.state.iterations + count,
                         f"this loop runs {count:,} iterations", loop_vars)
        self.state.iterations += count
        for combo in product(*(r for _, r in ranges)):
            env = dict(self.env)
            env.update({name: v for (name, _), v in zip(ranges, combo, strict=True)})
            yield env, dict(self.defined)

    @contextmanager
    def block(self, where: Any) -> Iterator[None]:
        """Count one more open block (loop/if body or used file) against ``nesting``."""
        self.state.blocks += 1
        try:
            self.check_limit("nesting", self.state.blocks,
                             "blocks and used files nest too deeply", where)
            yield
        finally:
            self.state.blocks -= 1

    def do_if_stmt(self, t: Tree) -> None:
        a, op, b = t.children[0].children
        x, y = expr(a, self.env), expr(b, self.env)
        holds = {"==": x == y, "!=": x != y, "<=": x <= y, ">=": x >= y, "<": x < y,
                 ">": x > y}[str(op)]
        with self.block(t):
            if holds:
                self.run(t.children[1].children)
            elif len(t.children) > 2:
                self.run(t.children[2].children)

    def do_for_stmt(self, t: Tree) -> None:
        body = t.children[1].children
        with self.block(t):
            for env, defined in self.loop_envs(t.children[0]):
                saved = self.env, self.defined
                self.env, self.defined = env, defined
                try:
                    self.run(body)
                finally:
                    self.env, self.defined = saved

    # -- references --------------------------------------------------------------------------
    def refs(self, t: Tree) -> list[int]:
        """Resolve a ``refs`` list to node keys (duplicates removed, order kept)."""
        out: list[int] = []
        seen: set[int] = set()
        for r in t.children:
            for k in self.ref(r):
                if k not in seen:
                    seen.add(k)
                    out.append(k)
        return out

    def ref(self, r: Tree) -> list[int]:
        if r.data == "id_ref":
            k = integer(r.children[0], self.env, "an NPU id")
            if not 0 <= k < len(self.state.npus):
                raise self.error(f"NPU id {k} does not exist (0..{len(self.state.npus) - 1})", r)
            return [k]
        current: list[Namespace | int] = [self.ns]
        for seg in r.children:
            name = str(seg.children[0])
            nxt: list[Namespace | int] = []
            for ns in current:
                if not isinstance(ns, Namespace):
                    raise self.error(f"{self.label(ns)} has no member {name!r}", seg)
                if name not in ns.groups:
                    if name in self.env:
                        raise self.error(f"{name!r} is a value, not a node", seg)
                    close = difflib.get_close_matches(name, list(ns.groups), n=1)
                    raise self.error(f"unknown node {name!r}", seg,
                                     f"did you mean '{close[0]}'?" if close
                                     else "declare it first with  npu NAME[COUNT]")
                group = ns.groups[name]
                idx = seg.children[1:]
                if not idx:
                    nxt.extend(group.members)
                    continue
                if not group.shape:
                    raise self.error(f"{name!r} is a single node and takes no index", seg)
                lists = [self.index(i, group.shape, len(idx), a, name)
                         for a, i in enumerate(idx)]
                flats, err = flat_indices(group.shape, lists)
                if err:
                    raise self.error(f"{name}: {err}", seg)
                nxt.extend(group.members[f] for f in flats)
            current = nxt
        out: list[int] = []
        for m in current:
            out.extend(m.keys() if isinstance(m, Namespace) else [m])
        return out

    def index(self, node: Tree, shape: tuple[int, ...], n_idx: int, axis: int,
              name: str) -> list[int]:
        size = prod(shape) if n_idx == 1 else shape[axis]
        if isinstance(node, Tree) and node.data == "all_index":
            return list(range(size))
        if isinstance(node, Tree) and node.data == "range_index":
            lo = integer(node.children[0], self.env, "an index")
            hi = integer(node.children[1], self.env, "an index")
            if hi < lo:
                raise self.error(f"empty range {lo}..{hi}", node, "ranges go from low to high")
            if n_idx == len(shape) or n_idx == 1:  # bounds first: a range may be huge
                for bad in (lo, hi):
                    if not 0 <= bad < size:
                        where = f" in dimension {axis}" if n_idx > 1 else ""
                        raise self.error(f"{name}: index {bad} is out of range "
                                         f"0..{size - 1}{where}", node)
            return list(range(lo, hi + 1))
        return [integer(node, self.env, "an index")]


def evaluate(text: str, source: str, params: dict[str, Any] | None = None,
             include_dirs: Iterable[str | Path] | None = None) -> State:
    """Parse and evaluate a TDL file's text; ``params`` override its ``param`` defaults.

    ``include_dirs`` are further folders ``use "path"`` may read from (see
    :mod:`tacos.frontends.tdl_includes`).
    """
    tree = parse_tree(text, source)
    state = State(includes=IncludePolicy.for_source(source, include_dirs))
    declared = {str(s.children[0]) for s in tree.children
                if isinstance(s, Tree) and s.data == "param_stmt"}
    for p in params or {}:
        if p not in declared:
            raise TacosError(f"{source} has no parameter {p!r}",
                             hint=f"its parameters: {', '.join(sorted(declared)) or 'none'}")
    Scope(state, source, text, Namespace(), "", dict(params or {}), 0).run(tree.children)
    return state


__all__ = ["evaluate", "State", "Quantity"]
