"""Prompts: the paper's in-context examples (appendix C.4) and SeaKR's prompt builder."""
from __future__ import annotations

from ..core.errors import UserError
from .examples import HOTPOTQA, IIRC, SIMPLE_QA, TWOWIKI, Demo
from .fit import PromptFitter
from .official import official_demos
from .seakr import (
    BASE_STOPS,
    INSTRUCTION,
    build_prompt,
    format_context,
    format_demo,
    format_step,
    read_all_docs_prompt,
    read_all_steps_prompt,
    simple_qa_stops,
    stop_strings,
)

# Data set name -> family. The bundled sets stand in for the paper's; FanOutQA uses the simple-QA
# demos as the brief of the package asks.
DEMOS = {"2wiki": TWOWIKI, "hotpotqa": HOTPOTQA, "iirc": IIRC, "simple": SIMPLE_QA}
DEMO_SOURCES = ("paper", "official")  # prompts.demos: the paper's figures | the code's lists


def dataset_family(dataset_name: str) -> str:
    """'2wiki' | 'hotpotqa' | 'iirc' | 'simple' for a data set name (case-insensitive)."""
    from ..data.registry import DATASETS     # the one data-set family map

    spec = DATASETS.get(dataset_name.lower())
    if spec is None:
        raise UserError(f"no prompt examples for data set '{dataset_name}'", setting="datasets",
                        fix=f"use one of {', '.join(sorted(DATASETS))}")
    return spec.family


def demos_for(dataset_name: str, n_shot: int | None = None, source: str = "paper",
              official_repo: str | None = None) -> list[Demo]:
    """The first `n_shot` (None: all) in-context examples of a data set: the paper's figures (`source`
    'paper', bundled) or the lists of the authors' code in the clone at `official_repo` ('official')."""
    family = dataset_family(dataset_name)
    if source == "paper":
        demos = list(DEMOS[family])
    elif source == "official":
        demos = list(official_demos(official_repo, family))
    else:
        raise UserError(f"unknown demo source {source!r}", setting="prompts.demos",
                        fix=f"use one of {', '.join(DEMO_SOURCES)}")
    if n_shot is None:
        return demos
    if n_shot < 0:
        raise UserError(f"n_shot must be >= 0, not {n_shot}", setting="seakr.n_shot",
                        fix="give a non-negative number of examples")
    return demos[:n_shot]


__all__ = ["Demo", "DEMOS", "SIMPLE_QA", "TWOWIKI", "HOTPOTQA", "IIRC", "BASE_STOPS",
           "INSTRUCTION", "build_prompt", "format_context", "format_demo", "format_step",
           "read_all_docs_prompt", "read_all_steps_prompt", "simple_qa_stops", "stop_strings",
           "dataset_family", "demos_for", "official_demos", "DEMO_SOURCES", "PromptFitter"]
