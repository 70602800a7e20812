"""NCCL's algorithms as baselines (rings, trees, NVLS, CollNet, PAT, point-to-point): the solvers
in :mod:`.solver`, the system model NCCL's tuner sees in :mod:`.system`.
"""
