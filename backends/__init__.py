"""Back ends: a schedule to the bytes a runtime or a tool reads.

:data:`EMITTERS` is the registry :func:`tacos.emit` dispatches on: a format name to
``"module:function"``, imported on first use; the function takes ``(schedule, **options)`` and
returns the text.  The MSCCL dialects' writers live with their dialect in :mod:`tacos.msccl`.
"""

EMITTERS: dict[str, str] = {
    "schedule-json": "tacos.backends.json_schedule:dumps",
    "msccl-xml": "tacos.msccl.emit:xml",
    "mscclpp-json": "tacos.msccl.emit:mscclpp",
}
"""Format name -> ``"module:function(schedule, **options) -> str"``."""

ALIASES: dict[str, str] = {"json": "schedule-json", "xml": "msccl-xml", "mscclpp": "mscclpp-json"}
"""Short names (the ``tacosc -f`` spellings) of the formats in :data:`EMITTERS`."""
