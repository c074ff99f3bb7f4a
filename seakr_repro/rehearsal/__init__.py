"""The GPU rehearsal: what a lent GPU can prove about this package, in prepared calls (one,
and a second for what does not fit it: plan.py).

- driver.py: the entry (`python -m seakr_repro.rehearsal`, scripts/gpu_rehearsal.sh): arguments,
  each part in a process of its own under its limit, the call's budget, the report, `--merge`;
- child.py: what runs in a part's process (the cap, the card's sampler, the result files);
- parts/: one module per part and the table the driver dispatches through;
- plan.py: the parts' order and estimates (start, imports, builds, work), the prepared calls and
  their budgets with slack, the second call of what did not fit;
- cold_start.py: times the parts' process start, imports and the bytecode compile from a pack
  without bytecode (data/measured/rehearsal_cold_start.json, which plan.py reads);
- verdicts.py: the one place a part's status is set; merging reports;
- tested_with.py: the torch and transformers versions the package was tested with (env's verdict);
- card_memory.py: the memory cap, and the card's use outside torch sampled in the background;
- device.py: the device, its dtype, the card's peak; stand_ins.py: the tokenizer, random-weight
  models and the paper profile on stand-in data;
- pack.py: what travels to the machine (scripts/gpu_rehearsal_pack.sh) and the commit it names;
- assumptions.py: the lent machine's limits, in one place.
docs/measurements.md ("GPU rehearsal") has the calls to run and the plan's arithmetic.
"""
