"""SGLang's transfer for ``execute`` and ``bench``: its tasks and rank programs (P WRITEs
per-slot entries), one host or two."""
