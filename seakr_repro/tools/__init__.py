"""Commands beside the pipeline: benchmarks, the GPU and scale checks, preflight and status."""
