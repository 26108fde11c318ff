"""Will these two ``vllm serve`` engines work together as P and D, and if not, what to change?
The rooms are listed in docs/architecture.md."""
