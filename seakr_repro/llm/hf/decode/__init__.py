"""The transformers backend's decode paths (`model.decode`): one module per path behind one
interface (`base.DecodePath`), their names in `core.setting_choices` (which imports no torch: the
settings schema reads it). The paths, each name's strategy in `paths`:
  python    the loop as first written: several host read-backs per step, new input tensors built
            from Python lists, attention as matrix and element-wise operations;
  one_sync  one host read-back per step (tokens, log-probs, statistics in one transfer); the next
            inputs and positions stay on the device (a host-to-device copy only when rows finish);
  fused     one_sync + decode-step attention as two fused kernels merged by log-sum-exp;
  static    one_sync's step over preallocated buffers written in place (the rows' generated keys
            and values, inputs, positions, the step index on the device), finished rows kept as
            padding: a step with no host synchronisation, run eagerly (any device);
  graph     the static step captured once per call as a CUDA graph and replayed (CUDA only).
`auto` (the default) is one_sync: the fastest path that gives the python path's results bit for bit
(so cached calls and the side-by-side checks against the authors' code hold). fused, static and
graph give the same tokens and vectors with log-probabilities within float rounding (~1e-5), and
are chosen explicitly until a GPU has measured them (docs/speed.md, "GPU pace").
"""
