"""Preflight's shared half (``report``); each engine's preflight lives in its package."""
