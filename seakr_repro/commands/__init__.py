"""The user's commands beside `reproduce`, each a `python -m seakr_repro` subcommand (cli.py): how
far a run has got (status), two runs side by side (compare-runs), and git's clean filter for the
notebooks (nbstrip). The check before a run (`preflight`) is `runs.preflight`, which `reproduce`
runs too."""
