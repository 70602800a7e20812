"""The IR and the link-level machine model: topology, routes, collectives, schedules.

Nothing here imports the layers above (checks, passes, solvers, dialects, front or back ends).
"""
