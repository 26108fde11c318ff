"""How vLLM's answers look: plan, check (and its JUnit XML), inspect's engine lines, execute,
preflight and conformance."""
