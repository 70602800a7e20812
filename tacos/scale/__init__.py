"""Plans for data-center-scale systems from one solve per group shape (isomorphic groups)."""
