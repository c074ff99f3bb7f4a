"""The notebook steps, one module each: prepare (00-01), extraction (02), estimators (03), tables
(04-07 and 09), case_studies (08), seed_methods (10), mechanisms (11), render and its claims
ledger (90). What answers questions at scale (runner, grid, engines, planning) is the layer below,
`seakr_repro.runs`."""
