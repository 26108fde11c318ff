"""``bench``: a plan's real transfer measured against the machine's limit, pulled and pushed.

``variants`` (what a bench run moves: its variants, directions, the ranks' tasks and the limit's
chunks; pure, no NIXL), ``measure`` (one run per request size on ``execute``'s coordinator, and the
bench document), ``rank`` (bench's P and D rank programs, which ``execute.rank_process`` runs).
"""
