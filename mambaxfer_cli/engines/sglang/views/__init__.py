"""How SGLang's answers look: plan, check, inspect, preflight, execute and conformance."""
