"""Solvers: each turns a topology and a collective into a Schedule."""
