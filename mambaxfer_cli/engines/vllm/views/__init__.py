"""vLLM's views: how its plan, check, preflight and conformance reports are drawn."""
