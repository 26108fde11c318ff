"""``execute``: the NIXL machinery every engine's transfer runs on (the programs are the engines':
``engines/<name>/transfer/``); it names no engine.

Pure, no NIXL: ``tasks`` (the run's settings, a rank's task and memory), ``difference`` (where two
documents differ), ``agreement`` (two hosts' control messages), ``discovery`` (how two hosts find
each other), ``device``. The coordinator spawns one process per rank, follows their progress and
stops them, knowing no program; ``messages`` (typed, both ways) and ``results`` (the base type of
what ranks return) pass between them. A rank process: ``rank_process`` (its entry: runs the program
its task names), ``channel`` (its end of the pipe, its ways to fail), ``agent`` (its NIXL agent and
memory), ``remote`` (a two-host run's notifications), ``side_channel`` (metadata over a loopback
socket), ``faults`` (faults the tests inject); ``memory`` and ``nixl_api`` touch torch and NIXL.
"""
