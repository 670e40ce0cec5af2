"""The engine: one question through every stage (parse, optimize, plan, execute), and its parts built from one config."""
