"""The planning core: model parameters in, frozen values out (rank layouts, reads, engine
geometry, vLLM's verdict, descriptor IDs, the plan). Pure: no I/O, no printing, no torch, no NIXL.
"""
