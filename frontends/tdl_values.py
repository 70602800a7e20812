"""Evaluation of TDL values: integer expressions, quantities with units, link properties."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from tacos import limits
from tacos.limits import MAX_INTEGER
from tacos.model.units import BANDWIDTH_UNITS, SIZE_UNITS, TIME_UNITS, unit_kind

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
    """A NUMBER token as int when it has no fraction/exponent, else float (finite, bounded)."""
    text = str(tok)
    if text.isdigit():
        return _bounded(int(text) if len(text) < 20 else MAX_INTEGER + 1, tok)
    return _bounded(float(text), tok)


def _bounded(value: int | float, where: Any) -> int | float:
    """``value`` if finite (a float) or at most :data:`~tacos.limits.MAX_INTEGER` in magnitude
    (an int)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError_("number out of range (not finite)", where,
                          "numbers must be finite; check the exponent")
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        raise ValueError_(f"number out of range (larger than 2^53 = {MAX_INTEGER})", where)
    return value


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
    value *= table[unit]
    if not math.isfinite(value):
        raise ValueError_("quantity out of range (not finite)", node)
    return Quantity(value, kind, unit)


def _did_you_mean(name: str, options: Any) -> str | None:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean '{close[0]}'?" if close else None


def expr(node: Tree | Token, env: dict[str, Any]) -> int | float:
    """Evaluate an integer/float expression tree with variables from ``env``.

    Iterative (an explicit stack), so a long ``1 + 1 + ...`` cannot exhaust Python's stack;
    every intermediate value must stay finite and within 2^53.
    """
    values: list[int | float] = []
    stack: list[tuple[Tree | Token, bool]] = [(node, False)]
    while stack:
        item, ready = stack.pop()
        if isinstance(item, Token):
            if item.type != "NUMBER":
                raise ValueError_(f"unexpected {item!s}", item)
            values.append(number(item))
            continue
        op = item.data
        if op in ("num", "var"):
            values.append(_leaf(item, env))
            continue
        if not ready:
            stack.append((item, True))
            stack.extend((c, False) for c in reversed(item.children))
            continue
        if op == "neg":
            values.append(-values.pop())
            continue
        b, a = values.pop(), values.pop()
        values.append(_bounded(_apply(op, a, b, item), item))
    return values[0]


def _leaf(node: Tree, env: dict[str, Any]) -> int | float:
    if node.data == "num":
        return number(node.children[0])
    name = str(node.children[0])
    if name not in env:
        raise ValueError_(f"unknown name {name!r}", node.children[0],
                          _did_you_mean(name, env) or "declare it with  let NAME = VALUE")
    val = env[name]
    if isinstance(val, Quantity):
        raise ValueError_(f"{name!r} is a quantity, not a number; write ${name}",
                          node.children[0])
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise ValueError_(f"{name!r} is not a number", node.children[0])
    return _bounded(val, node.children[0])


def _apply(op: str, a: int | float, b: int | float, node: Tree) -> int | float:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        if isinstance(a, int) and isinstance(b, int) and a and b \
                and abs(a) > MAX_INTEGER // abs(b):
            raise ValueError_(f"number out of range (larger than 2^53 = {MAX_INTEGER})", node)
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
        val = _bounded(int(val), node)
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
                _in_range("bandwidth", q.value, item)
                props.bandwidth = q.value
            elif kind == "time":
                if props.latency is not None:
                    raise ValueError_("latency given twice", item)
                if q.value < 0:
                    raise ValueError_("latency cannot be negative", item)
                _in_range("latency", q.value, item)
                props.latency = q.value
            else:
                raise ValueError_(f"a link has a bandwidth and a latency, not a {kind}", item,
                                  "bandwidth units: GB/s GiB/s Gb/s MB/s; time: ns us ms s")
        elif item.data == "mult":
            digits = str(item.children[0])[1:]
            m = int(digits) if len(digits) < 20 else MAX_INTEGER
            if m < 1:
                raise ValueError_("multiplicity must be at least x1", item)
            limit = limits.current().multiplicity
            if m > limit:
                raise ValueError_(f"multiplicity x{m} exceeds the limit of x{limit} "
                                  "(multiplicity)", item,
                                  f"raise it with --limit multiplicity={m} if this is intended")
            props.multiplicity = m
        elif item.data == "tag_opt":
            props.tag = str(item.children[0])
        elif item.data == "dim_opt":
            props.dim = integer(item.children[0], env, "dim")
    return props


def _in_range(kind: str, value: float, where: Any) -> None:
    problem = limits.check_number(kind, value)
    if problem is not None:
        raise ValueError_(problem, where)
