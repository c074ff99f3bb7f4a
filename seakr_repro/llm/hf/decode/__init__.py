"""The transformers backend's decode paths (`model.decode`, names in `core.setting_choices`): one
module per path behind `base.DecodePath`, each name's strategy in `paths` (docs/speed.md, "GPU
pace"). `auto` is one_sync, the fastest path that gives the python path's results bit for bit (so
cached calls and the checks against the authors' code hold); fused, static and graph give the
same tokens and vectors with log-probabilities within float rounding, and are chosen explicitly.
"""
