"""Small values and helpers every stage shares: passages, paths, safe writes, logs, definition files."""
