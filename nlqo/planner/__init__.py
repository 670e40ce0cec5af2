"""Stage 3, physical planning: estimates, statistics and the choice of an operator for a logical plan."""
