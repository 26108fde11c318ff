"""vLLM's special treatment of some model families: one module per family, named as the core's (`families/`)."""
