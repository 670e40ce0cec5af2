"""Evaluation: question sets, answer metrics, the resumable bench loop and generated reports.

``datasets`` reads question files; ``metrics`` scores predictions (EM, F1, Acc, yes/no, bootstrap,
evidence recall); ``judge`` grades with an LLM; ``runner`` runs strategies side by side into a
result folder; ``summary`` and ``plots`` aggregate it; ``report`` writes docs/benchmarks.md.
"""
