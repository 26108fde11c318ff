"""Proving plans byte by byte without NIXL."""

# Smaller engines than plan's keep the check fast; the ID arithmetic is the same, and different
# sizes on the two sides catch an ID computed with the other engine's N.
CHECK_NUM_BLOCKS = {"prefill": 4096, "decode": 2048}
