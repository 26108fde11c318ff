"""``bench``: what both engines' benches share (each engine's runs are in its ``transfer/``)."""
