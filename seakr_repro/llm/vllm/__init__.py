"""The vLLM backend: the engine thread, the backend, and the functions that run in vLLM's workers."""
