"""Cross-mesh resharding (seed 001): meshes, sharding specs, unit tasks, plans and baselines.

::

    from tacos.reshard import DeviceMesh, Reshard, plan_reshard
    src = DeviceMesh.of(range(8), (2, 4))
    dst = DeviceMesh.of(range(8, 16), (2, 4))
    r = Reshard.of((1024, 1024, 512), src, "RS0R", dst, "S0RR")
    r.tasks                              # the unit communication tasks
    result = plan_reshard(topology, r)   # plan, bound, baselines; result.text()
"""

from importlib import import_module
from typing import Any

# imported on first use: reading a TDL file with a reshard statement needs the meshes and
# specs, not the planner (which brings in the bounds and networkx)
_LAZY = {"ReshardResult": "plan", "plan_reshard": "plan", "DeviceMesh": "sharding",
         "ShardingError": "sharding", "ShardingSpec": "sharding", "Reshard": "tasks",
         "UnitTask": "tasks", "reshard_collective": "tasks"}

__all__ = ["DeviceMesh", "Reshard", "ReshardResult", "ShardingError", "ShardingSpec",
           "UnitTask", "plan_reshard", "reshard_collective"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f"tacos.reshard.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tacos.reshard' has no attribute {name!r}")
