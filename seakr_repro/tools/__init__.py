"""Commands beside the pipeline: benchmarks, the scale check, preflight and status (the GPU rehearsal
has a room of its own: seakr_repro/rehearsal/)."""
