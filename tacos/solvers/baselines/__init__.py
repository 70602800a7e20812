"""Textbook baselines (ring, bidirectional ring, direct, halving-doubling, double binary tree,
hierarchical): the solvers in :mod:`.solver`, the logical programs in :mod:`.algos`.
"""
