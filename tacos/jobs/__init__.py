"""Several jobs on one fabric (seed 002): declaration, routing, joint planning and fairness."""
