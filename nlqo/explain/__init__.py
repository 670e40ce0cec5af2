"""EXPLAIN and EXPLAIN ANALYZE: plans and traces as text, JSON, DOT and an HTML page."""
