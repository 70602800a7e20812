"""Cross-mesh resharding (seed 001): meshes, sharding specs, unit tasks, plans and baselines.

::

    from tacos.reshard import DeviceMesh, Reshard, plan_reshard
    src = DeviceMesh.of(range(8), (2, 4))
    dst = DeviceMesh.of(range(8, 16), (2, 4))
    r = Reshard.of((1024, 1024, 512), src, "RS0R", dst, "S0RR")
    r.tasks                              # the unit communication tasks
    result = plan_reshard(topology, r)   # plan, bound, baselines; result.text()
"""

from tacos.reshard.plan import ReshardResult, plan_reshard
from tacos.reshard.sharding import DeviceMesh, ShardingError, ShardingSpec
from tacos.reshard.tasks import Reshard, UnitTask, reshard_collective

__all__ = ["DeviceMesh", "Reshard", "ReshardResult", "ShardingError", "ShardingSpec",
           "UnitTask", "plan_reshard", "reshard_collective"]
