"""Stage 1, parse: a question to an IR program through an LLM, validated and repaired within a bound."""
