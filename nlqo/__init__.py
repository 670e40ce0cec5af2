"""nlqo: a natural-language query optimizer.

A multi-hop question is parsed into a small program of triples (the IR), optimised into the
cheapest logical query tree (LQT) under a pluggable cost model, lowered to a physical plan and
executed with a local LLM and a dense retriever. Every step can be EXPLAINed.
"""

__version__ = "0.1.0"
