"""A schedule as MSCCL XML or as an MSCCL++ plan, lowered and verified (the registry entries
of :data:`tacos.backends.EMITTERS`)."""

from __future__ import annotations

from typing import Any

from tacos.model.schedule import Schedule
from tacos.msccl.lower import msccl_options
from tacos.msccl.mscclpp_writer import emit_mscclpp_json
from tacos.msccl.xml_writer import schedule_to_xml


def xml(schedule: Schedule, **options: Any) -> str:
    """MSCCL XML for msccl-executor-nccl, lowered and verified (never unverified text).

    ``options`` are :class:`tacos.msccl.lower.MscclOptions` fields: ``name``, ``proto``
    (Simple, LL, LL128), ``inplace``, ``min_bytes``/``max_bytes`` (bytes or ``"1MiB"``),
    ``instances`` (channel instances: each chunk split over that many channels),
    ``max_steps_per_tb``, ``max_channels``, ``redop``.  See ``docs/msccl.md``.
    """
    return schedule_to_xml(schedule, msccl_options(**options))


def mscclpp(schedule: Schedule, **options: Any) -> str:
    """MSCCL++ JSON execution plan (lowered and verified); takes the options of :func:`xml`
    (``proto`` must be Simple)."""
    return emit_mscclpp_json(schedule, options=msccl_options(**options),
                             name=options.get("name") or None)
