"""The ILP family (time-expanded network): the solver in :mod:`.solver`, the model, the step-grid
problem, clustering and recovery.
"""
