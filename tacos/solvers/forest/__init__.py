"""The forest family (timed spanning-tree packings): the solver in :mod:`.solver`, one module per
tree shape.
"""
