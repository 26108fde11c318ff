"""``execute``: a plan performed with real NIXL transfers between real processes (``bench``, in
``mambaxfer_cli.bench``, runs its own rank programs on the same machinery).

The plan side (pure, no NIXL): ``plan_source`` (the plan to run), ``tasks`` (what each rank does),
``difference`` (where two plan documents differ),
``agreement`` (what two hosts compare), ``discovery`` (how two hosts find each other), ``device``.

The coordinator side: ``coordinator`` spawns one process per rank, follows their progress and stops
them, knowing no program; ``run`` is an execute run and its document.
Between them and the ranks: ``messages`` (typed, both ways) and ``results`` (what ranks measured).

A rank process: ``rank_process`` (its entry), ``channel`` (its end of the pipe, its ways to fail),
``agent`` (its NIXL agent and memory: set up, fill, exchange, prepare, transfer, release),
``rank`` (execute's P and D programs; bench's are ``bench.rank``), ``remote`` (a two-host run's side),
``side_channel`` (metadata over a loopback socket), ``verify`` (D's check of every byte), ``faults``
(faults the tests inject); ``memory`` and ``nixl_api`` are the only places that touch torch and NIXL.
"""
