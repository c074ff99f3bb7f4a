"""SeaKR's prompt and stop strings, character for character as the official reasoner builds them.

    <demo 1>\n\n<demo 2>\n\n...\n\n[Context: [1] doc\n[2] doc\n]Answer in the same format as before. \n
    Question: q\nAnswer: <steps so far>

A demo is "Question: q\nAnswer: s1. s2. So the answer is a." where each step has its periods
replaced by spaces, is stripped and gets one closing period ("Edward L  Cahn died."), so ". " can
stop one step. Generated steps are written the same way in `fixed` mode; `faithful` deletes their
periods and keeps the engine's space before each (docs/faithful-and-fixed.md, "Step spacing").
"""
from __future__ import annotations

from typing import Callable, Sequence

from .examples import Demo

INSTRUCTION = "Answer in the same format as before. "
BASE_STOPS = ("\n\n", "\nQuestion:", "\nContext")
STEP_MODES = ("fixed", "faithful")


def format_demo_step(step: str) -> str:
    return step.replace(".", " ").strip() + "."


def format_step(step: str, mode: str = "fixed") -> str:
    """One generated step as it is written back into the prompt (see the module doc)."""
    if mode == "faithful":
        return step.replace(".", "") + "."
    if mode != "fixed":
        raise ValueError(f"unknown step mode {mode!r}; use one of {STEP_MODES}")
    return format_demo_step(step)


def format_demo(demo: Demo) -> str:
    steps = " ".join(format_demo_step(s) for s in demo.steps)
    return f"Question: {demo.question}\nAnswer: {steps} So the answer is {demo.answer}."


def format_context(docs: Sequence[str]) -> str:
    """"Context: [1] d1\n[2] d2\n" -- the empty string when there are no documents."""
    if not docs:
        return ""
    return "Context: " + "\n".join(f"[{i + 1}] {d}" for i, d in enumerate(docs)) + "\n"


def build_prompt(demos: Sequence[Demo], question: str, steps: Sequence[str] = (),
                 docs: Sequence[str] = (), mode: str = "fixed") -> str:
    """The SeaKR prompt: demos, optional context, the question and the steps written so far."""
    prefix = "\n\n".join(format_demo(d) for d in demos)
    body = f"{INSTRUCTION}\nQuestion: {question}\nAnswer: "
    if steps:
        body += " ".join(format_step(s, mode) for s in steps)
    text = format_context(docs) + body
    # the official Dataset.__call__ always writes prefix + "\n\n", even with no demos (n_shot 0)
    return f"{prefix}\n\n{text}" if prefix or mode == "faithful" else text


def stop_strings(has_steps: bool, final: bool) -> list[str]:
    """Stops of one call: the base three, "\n" once steps exist, ". " unless in final mode."""
    stops = list(BASE_STOPS)
    if has_steps:
        stops.append("\n")
    if not final:
        stops.append(". ")
    return stops


def read_all_steps_prompt(demos: Sequence[Demo], question: str, steps: Sequence[str],
                          build: Callable = build_prompt) -> tuple[str, list[str]]:
    """Self-aware reasoning, rationale path: the steps as the context documents; stops: the non-final
    set with "\n" and without ". ", as the code builds them. `build`: build_prompt or a `PromptFitter`."""
    return build(demos, question, docs=list(steps)), [*BASE_STOPS, "\n"]


def read_all_docs_prompt(demos: Sequence[Demo], question: str, docs: Sequence[str],
                         build: Callable = build_prompt) -> tuple[str, list[str]]:
    """Self-aware reasoning, knowledge path: all selected documents, a full answer (final mode)."""
    return build(demos, question, docs=list(docs)), stop_strings(False, final=True)


def simple_qa_stops() -> list[str]:
    """Stops of the official simple-QA script (direct and one-passage prompts alike)."""
    return ["\n", *BASE_STOPS]
