"""The greedy family (TACOS's link-by-link greedy): the solver in :mod:`.solver`, one trial on the
engine that fits in :mod:`.trial` (pure Python :mod:`.core`, numba :mod:`.jit`, ports
:mod:`.ports`).
"""
