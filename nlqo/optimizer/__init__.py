"""Stage 2, the logical optimizer: rewrite rules, pair relations, cost models, the search, logical plans."""
