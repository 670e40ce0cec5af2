"""What the stages run on: LLM backends, bundled models, the embedder and every prompt."""
