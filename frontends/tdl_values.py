"""Evaluation of TDL values: integer expressions, quantities with units, link properties."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from tacos.units import BANDWIDTH_UNITS, SIZE_UNITS, TIME_UNITS, unit_kind

DEFAULT_UNITS = {"bandwidth": "GB/s", "time": "us", "size": "B"}


@dataclass(frozen=True)
class Quantity:
    """A value in base units (s, B, B/s) and its kind; ``kind=None`` for a bare number."""

    value: float
    kind: str | None
    unit: str = ""


class ValueError_(Exception):
    """Raised with a message and the offending tree/token; the builder adds the location."""

    def __init__(self, message: str, where: Any, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.where, self.hint = message, where, hint


def number(tok: Token) -> int | float:
    """A NUMBER token as int when it has no fraction/exponent, else float."""
    text = str(tok)
    if text.isdigit():
        return int(text)
    return float(text)


def quantity(node: Tree, env: dict[str, Any]) -> Quantity:
    """Evaluate a ``quantity``, ``quantity_var`` or ``unit_quantity`` node."""
    if node.data == "quantity_var":
        name = str(node.children[0])[1:]
        if name not in env:
            raise ValueError_(f"unknown constant ${name}", node.children[0],
                              _did_you_mean(name, env))
        val = env[name]
        if isinstance(val, Quantity):
            return val
        if isinstance(val, int | float):
            return Quantity(float(val), None)
        raise ValueError_(f"${name} is not a quantity", node.children[0])
    value = float(number(node.children[0]))
    if len(node.children) == 1:
        return Quantity(value, None)
    unit = str(node.children[1])
    kind = unit_kind(unit)
    table = {"time": TIME_UNITS, "size": SIZE_UNITS, "bandwidth": BANDWIDTH_UNITS}[kind or "time"]
    return Quantity(value * table[unit], kind, unit)


def _did_you_mean(name: str, options: Any) -> str | None:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean '{close[0]}'?" if close else None


def expr(node: Tree | Token, env: dict[str, Any]) -> int | float:
    """Evaluate an integer/float expression tree with variables from ``env``."""
    if isinstance(node, Token):
        if node.type == "NUMBER":
            return number(node)
        raise ValueError_(f"unexpected {node!s}", node)
    op = node.data
    if op == "num":
        return number(node.children[0])
    if op == "var":
        name = str(node.children[0])
        if name not in env:
            raise ValueError_(f"unknown name {name!r}", node.children[0],
                              _did_you_mean(name, env) or "declare it with  let NAME = VALUE")
        val = env[name]
        if isinstance(val, Quantity):
            raise ValueError_(f"{name!r} is a quantity, not a number; write ${name}",
                              node.children[0])
        if not isinstance(val, int | float):
            raise ValueError_(f"{name!r} is not a number", node.children[0])
        return val
    if op == "neg":
        return -expr(node.children[0], env)
    a, b = (expr(c, env) for c in node.children)
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op in ("div", "mod"):
        if b == 0:
            raise ValueError_("division by zero", node)
        if isinstance(a, int) and isinstance(b, int):
            return a // b if op == "div" else a % b
        return a / b if op == "div" else a % b
    raise ValueError_(f"cannot evaluate {op}", node)


def integer(node: Tree | Token, env: dict[str, Any], what: str = "value") -> int:
    """Evaluate an expression that must be a whole number."""
    val = expr(node, env)
    if isinstance(val, float):
        if not val.is_integer():
            raise ValueError_(f"{what} must be a whole number, not {val}", node)
        val = int(val)
    return val


@dataclass
class LinkProps:
    """Bandwidth (B/s), latency (s), multiplicity, tag and dimension given on a statement."""

    bandwidth: float | None = None
    latency: float | None = None
    multiplicity: int = 1
    tag: str = ""
    dim: int | None = None


def link_props(items: list[Tree], env: dict[str, Any]) -> LinkProps:
    """Read link properties; bare numbers mean GB/s then us (the documented defaults)."""
    props = LinkProps()
    for item in items:
        if item.data in ("quantity", "quantity_var"):
            q = quantity(item, env)
            kind = q.kind
            if kind is None:
                kind = "bandwidth" if props.bandwidth is None else "time"
                scale = BANDWIDTH_UNITS["GB/s"] if kind == "bandwidth" else TIME_UNITS["us"]
                q = Quantity(q.value * scale, kind)
            if kind == "bandwidth":
                if props.bandwidth is not None:
                    raise ValueError_("bandwidth given twice", item)
                if q.value <= 0:
                    raise ValueError_("bandwidth must be positive", item,
                                      "a failed link is written  fail link SRC -> DST")
                props.bandwidth = q.value
            elif kind == "time":
                if props.latency is not None:
                    raise ValueError_("latency given twice", item)
                if q.value < 0:
                    raise ValueError_("latency cannot be negative", item)
                props.latency = q.value
            else:
                raise ValueError_(f"a link has a bandwidth and a latency, not a {kind}", item,
                                  "bandwidth units: GB/s GiB/s Gb/s MB/s; time: ns us ms s")
        elif item.data == "mult":
            m = int(str(item.children[0])[1:])
            if m < 1:
                raise ValueError_("multiplicity must be at least x1", item)
            props.multiplicity = m
        elif item.data == "tag_opt":
            props.tag = str(item.children[0])
        elif item.data == "dim_opt":
            props.dim = integer(item.children[0], env, "dim")
    return props
