"""Stage 4, execution: the engine, its operators, their executors and the trace they record."""
