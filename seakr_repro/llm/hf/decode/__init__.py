"""The transformers backend's decode paths (`model.decode`): one module per path behind one
interface (`base.DecodePath`), their names in `core.setting_choices` (which imports no torch: the
settings schema reads it), each name's strategy in `paths`: python (the loop as first written),
one_sync (one host read-back per step), fused (one_sync with two fused attention kernels), static
(one_sync's step over preallocated buffers, no host synchronisation) and graph (the static step
as a CUDA graph; CUDA only). docs/speed.md ("GPU pace") describes each and its measurements.
`auto` (the default) is one_sync: the fastest path that gives the python path's results bit for
bit (so cached calls and the side-by-side checks against the authors' code hold). fused, static
and graph give the same tokens and vectors with log-probabilities within float rounding (~1e-5),
and are chosen explicitly until a GPU has measured them.
"""
