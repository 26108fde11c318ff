"""Will these two ``vllm serve`` engines work together as P and D, and if not, what to change?

Each line becomes the engine its vLLM release builds from it on the GPU (model, dtypes, geometry);
then the pairing gets vLLM's own verdict (what its engines refuse at start-up and its handshake refuses), a
byte-level check of the reads vLLM would issue (``check``'s simulation, D reading P's pages with
D's offsets), and, when anything fails, the smallest set of flag changes that makes it work.

The rooms, in the order a run goes through them: ``served`` (each line read into its engine),
``fields`` (what is compared), ``refusals`` (vLLM's verdict), ``fix`` (the flag changes) and
``report`` (the document).
"""
