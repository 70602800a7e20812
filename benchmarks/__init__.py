"""The tacos benchmark suite: ``python -m benchmarks run [--quick]`` (see docs/benchmarks.md).

Cases a–h reproduce the evaluation of the TACOS paper (Fig. 19, Tables I–V, Fig. 21), the
synthesis-time scaling and real systems against the min-cut optimum, for every solver that is
available, next to the classic baselines.
"""
