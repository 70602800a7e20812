"""Middle-layer passes: plain functions from one typed value to the next."""
