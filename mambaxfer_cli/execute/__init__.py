"""``execute``: the NIXL machinery every engine's transfer runs on (the programs are the engines':
``engines/<name>/transfer/``); it names no engine. Only ``memory`` and ``nixl_api`` touch torch
and NIXL; the coordinator runs one process per rank (``rank_process``, ``channel``, ``agent``).
"""
