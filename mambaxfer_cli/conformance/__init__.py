"""Conformance's shared half (``report``); each engine's run lives in its package."""
