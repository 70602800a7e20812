"""The judges of a schedule: the α-β simulator, the verifier, lower bounds, the shared link
tables and the in-switch group rules.  Imports only :mod:`tacos.model` (and the error types).
"""
