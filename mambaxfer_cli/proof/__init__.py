"""Proving plans byte by byte without NIXL: the pattern every page holds, what each page of a
request must hold, the simulated transfer and the ``check`` run over pairings."""
