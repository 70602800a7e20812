"""``tacos.emit``: a schedule in any output format of the back-end registry."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule


def formats() -> list[str]:
    """The format names :func:`emit` takes (registry names, then their short aliases).

    >>> formats()[:3]
    ['msccl-xml', 'mscclpp-json', 'schedule-json']
    """
    from tacos.backends import ALIASES, EMITTERS

    return sorted(EMITTERS) + sorted(ALIASES)


def emit(schedule: Schedule, format: str, **options: Any) -> str:
    """``schedule`` as text in ``format``: ``"schedule-json"`` (``"json"``), ``"msccl-xml"``
    (``"xml"``, lowered and verified) or ``"mscclpp-json"`` (``"mscclpp"``).

    ``options`` go to the back end: ``bound`` for JSON; the
    :class:`~tacos.msccl.lower.MscclOptions` fields (``name``, ``proto``, ``instances``,
    ``max_bytes``, ...) for the MSCCL formats.  Unknown formats raise
    :class:`~tacos.errors.TacosError` with the closest name as a hint.
    """
    from tacos.backends import ALIASES, EMITTERS

    name = ALIASES.get(format, format)
    if name not in EMITTERS:
        close = difflib.get_close_matches(format, formats(), n=1)
        raise TacosError(f"unknown output format {format!r}",
                         hint=f"did you mean {close[0]!r}?" if close
                         else "formats: " + ", ".join(formats()))
    module, _, attr = EMITTERS[name].partition(":")
    return getattr(importlib.import_module(module), attr)(schedule, **options)
