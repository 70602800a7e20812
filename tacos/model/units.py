"""Physical units used by the TDL and the CLI.

Internally time is in seconds, bandwidth in bytes/second and sizes in bytes.  Decimal prefixes
(K, M, G, T) are powers of 1000, binary ones (Ki, Mi, Gi, Ti) powers of 1024; a lower-case ``b``
means bits.
"""

from __future__ import annotations

import math
import re

TIME_UNITS: dict[str, float] = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}

SIZE_UNITS: dict[str, float] = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

BANDWIDTH_UNITS: dict[str, float] = {
    "B/s": 1,
    "KB/s": 1e3,
    "MB/s": 1e6,
    "GB/s": 1e9,
    "TB/s": 1e12,
    "KiB/s": 2**10,
    "MiB/s": 2**20,
    "GiB/s": 2**30,
    "TiB/s": 2**40,
    "b/s": 1 / 8,
    "Kb/s": 1e3 / 8,
    "Mb/s": 1e6 / 8,
    "Gb/s": 1e9 / 8,
    "Tb/s": 1e12 / 8,
    "bps": 1 / 8,
    "Kbps": 1e3 / 8,
    "Mbps": 1e6 / 8,
    "Gbps": 1e9 / 8,
    "Tbps": 1e12 / 8,
}

DEFAULT_TIME_UNIT = "us"
DEFAULT_BANDWIDTH_UNIT = "GB/s"
DEFAULT_SIZE_UNIT = "B"

_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")


def unit_kind(unit: str) -> str | None:
    """Return ``'time'``, ``'size'`` or ``'bandwidth'`` for a known unit, else ``None``."""
    if unit in TIME_UNITS:
        return "time"
    if unit in SIZE_UNITS:
        return "size"
    if unit in BANDWIDTH_UNITS:
        return "bandwidth"
    return None


def parse_quantity(text: str, kind: str, default_unit: str | None = None) -> float:
    """Parse ``'64MiB'``, ``'0.5 us'`` or ``'50GB/s'`` into base units of ``kind``.

    Raises ``ValueError`` with a readable message when the text is not a finite quantity of
    that kind.

    >>> parse_quantity("64MiB", "size")
    67108864.0
    >>> parse_quantity("2us", "time")
    2e-06
    """
    table = {"time": TIME_UNITS, "size": SIZE_UNITS, "bandwidth": BANDWIDTH_UNITS}[kind]
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a {kind} (expected a number and a unit)")
    value, unit = float(m.group(1)), m.group(2)
    if not unit:
        unit = default_unit or {"time": "s", "size": "B", "bandwidth": "B/s"}[kind]
    if unit not in table:
        raise ValueError(
            f"unknown {kind} unit {unit!r}; use one of {', '.join(sorted(set(table)))}"
        )
    result = value * table[unit]
    if not math.isfinite(result):
        raise ValueError(f"{text!r} is not a finite {kind}")
    return result


def as_quantity(value: int | float | str, kind: str, what: str,
                default_unit: str | None = None) -> float:
    """A bandwidth, time or size given as a number in base units (B/s, s, B) or as a text
    with a unit (``"25GB/s"``, ``"0.7us"``); :class:`~tacos.errors.TacosError` otherwise.

    >>> as_quantity("25GB/s", "bandwidth", "bandwidth"), as_quantity(1e-6, "time", "latency")
    (25000000000.0, 1e-06)
    """
    from tacos.errors import TacosError

    if isinstance(value, str):
        try:
            return parse_quantity(value, kind, default_unit)
        except ValueError as exc:
            raise TacosError(f"{what}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        unit = {"time": "seconds", "size": "bytes", "bandwidth": "bytes/s"}[kind]
        raise TacosError(f"{what}: {value!r} is not a {kind}",
                         hint=f"give a number of {unit} >= 0 or a text with a unit")
    return float(value)


SIZE_HINT = "sizes are bytes or a number with a unit: B, KB, MB, GB, KiB, MiB, GiB (e.g. 64MiB)"


def parse_size(value: int | float | str, what: str = "size") -> int:
    """A size in bytes from an int (bytes) or a text with a unit (``'64MiB'``, ``'1.5KB'``).

    The one size parser of the project: the Python API, the TDL and the command line
    (``--size``, ``--min-bytes``, ``--max-bytes``) all read sizes with it.  A bare number is
    bytes.  Raises :class:`~tacos.errors.TacosError` (naming ``what``) for text that is not a
    size, for a fraction of a byte, and for a negative size.

    >>> parse_size("64MiB"), parse_size("1.5KB"), parse_size(4096), parse_size("0")
    (67108864, 1500, 4096, 0)
    """
    from tacos.errors import TacosError

    if isinstance(value, bool):
        raise TacosError(f"{what}: {value!r} is not a size", hint=SIZE_HINT)
    if isinstance(value, int):
        if value < 0:
            raise TacosError(f"{what}: {value} is negative", hint=SIZE_HINT)
        return value
    if isinstance(value, float):
        number = value
        shown = repr(value)
    elif isinstance(value, str):
        try:
            number = parse_quantity(value, "size", default_unit="B")
        except ValueError as exc:
            raise TacosError(f"{what}: {exc}", hint=SIZE_HINT) from None
        shown = repr(value.strip())
    else:
        raise TacosError(f"{what}: {value!r} is not a size (give bytes or a text such as "
                         "'64MiB')", hint=SIZE_HINT)
    if not math.isfinite(number) or number < 0:
        raise TacosError(f"{what}: {shown} is not a size (sizes are finite and >= 0)",
                         hint=SIZE_HINT)
    if not float(number).is_integer():
        raise TacosError(f"{what}: {shown} is {number:g} bytes, not a whole number of bytes",
                         hint=f"use {math.floor(number)} or {math.ceil(number)} bytes")
    return int(number)


def format_time(seconds: float) -> str:
    """Human-readable time, e.g. ``'12.5 us'``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def format_size(nbytes: float) -> str:
    """Human-readable size with binary prefixes, e.g. ``'64 MiB'``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if abs(nbytes) >= SIZE_UNITS[unit]:
            return f"{nbytes / SIZE_UNITS[unit]:.4g} {unit}"
    return f"{nbytes:.0f} B"


def format_bandwidth(bps: float) -> str:
    """Human-readable bandwidth in decimal GB/s (the nccl-tests convention)."""
    return f"{bps / 1e9:.4g} GB/s"
