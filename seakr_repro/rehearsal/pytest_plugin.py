"""A pytest plugin the rehearsal's gpu_tests part loads into its pytest process
(`-p seakr_repro.rehearsal.pytest_plugin`): the process takes the part's memory cap and reports
its torch reserved memory to the part's card sampler (card_memory.join_part), so the GPU tests'
own use of the card is seen, and counted as torch's, while they run."""
from __future__ import annotations


def pytest_configure(config) -> None:
    from .card_memory import join_part

    join_part()
