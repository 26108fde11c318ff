"""vLLM's transfer programs for ``execute`` and ``bench``, run on ``execute/``'s NIXL machinery."""
