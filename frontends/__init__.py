"""Front ends: text a user or a tool wrote, read into tacos's IR or a dialect's program.

:data:`READERS` names the reader of each input format as ``"module:function"`` (a path in,
imported on first use).  Topology importers are registered in :mod:`tacos.importers`; the
MSCCL dialects' readers live with their dialect in :mod:`tacos.msccl`.
"""

READERS: dict[str, str] = {
    "tdl": "tacos.frontends.tdl:load_tdl",
    "schedule-json": "tacos.frontends.json_schedule:load",
    "msccl-xml": "tacos.msccl.xml_reader:load_xml",
    "mscclpp-json": "tacos.msccl.mscclpp_reader:load_plan",
}
"""Format name -> ``"module:function(path)"``."""
