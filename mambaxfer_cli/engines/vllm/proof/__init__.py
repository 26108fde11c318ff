"""vLLM's byte-level proof: the pages of a request, where descriptors point, the simulated reads, ``check``."""
