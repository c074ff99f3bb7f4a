"""What a profile costs (`python -m seakr_repro cost`): the dry run that counts its work
(`dry_run`), a run's recorded work read alike (`work`), the measured paces (`paces`), the work
scaled and priced (`estimate`), and the command's report (`command`)."""
