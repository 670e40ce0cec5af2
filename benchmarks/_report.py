"""Benchmarks write their tables into docs with the package's block writer."""

from nlqo.docblocks import write_block

__all__ = ["write_block"]
