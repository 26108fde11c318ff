"""``execute``: the plan performed with real NIXL transfers between real processes.

``tasks`` turns a plan into what each rank process does (pure), ``coordinator`` spawns one process
per P and D rank and collects their outcomes, ``rank`` is the process itself (P fills, D poisons,
prepares, READs and verifies), ``memory``/``nixl_api`` are the only places that touch torch and
NIXL, ``side_channel`` exchanges agent metadata over a loopback socket, ``verify`` checks D's bytes.
"""
