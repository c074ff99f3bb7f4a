"""One question, whatever data set it came from, and deterministic sub-sampling."""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence, TypeVar

from ..core.errors import UserError


@dataclass
class QuestionRecord:
    """A question with its gold answers: `answers` the data set's own, `aliases` extra strings that
    also count as correct (2Wiki's Wikidata aliases); evaluation takes the best match over `golds`.
    `supporting` names the evidence (page titles or passage ids), `source` the data set, `extra`
    anything format-specific."""

    id: str
    question: str
    answers: list[str]
    aliases: list[str] = field(default_factory=list)
    type: str = ""
    supporting: list[str] = field(default_factory=list)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def golds(self) -> list[str]:
        return list(dict.fromkeys([*self.answers, *self.aliases]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "QuestionRecord":
        missing = [k for k in ("id", "question", "answers") if k not in data]
        if missing:
            raise UserError(f"a question record lacks {', '.join(missing)}",
                            fix="records need at least id, question and answers")
        return cls(id=str(data["id"]), question=data["question"],
                   answers=list(data["answers"]), aliases=list(data.get("aliases", [])),
                   type=data.get("type", ""), supporting=list(data.get("supporting", [])),
                   source=data.get("source", ""), extra=dict(data.get("extra", {})))


T = TypeVar("T")


def sample(records: Sequence[T], n: int | None, seed: int = 42) -> list[T]:
    """The first `n` records of a permutation seeded by `seed`; n=None returns all, in file order.
    A prefix of one shuffle: a smaller sample lies inside a larger one with the same seed."""
    if n is None:
        return list(records)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UserError(f"the number of questions must be a non-negative integer or None, not {n!r}",
                        setting="n", fix="give a count such as 500, or leave it unset for all")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    return [records[i] for i in order[:n]]
