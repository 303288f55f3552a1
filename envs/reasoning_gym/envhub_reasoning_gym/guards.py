"""Where envhub grades a reply differently from Reasoning Gym's own `score_answer`, and why.

Reasoning Gym's scorer decides, except in two classes of reply that a policy can aim at without solving
the item (red-team findings, docs/rewards.md):

- **Hedges.** The default `score_answer` (and the custom ones of `CONTAINMENT_CREDIT`, which copy it)
  gives a reply that merely contains the answer `len(answer) / len(reply)`: "True False" was a sure
  0.4-0.5 on every yes/no item, and a list of candidates a share of 1 on any item. Here a reply that
  holds the answer among other text scores 0; the exact answer still scores 1.0, and every other score
  the dataset gives (its own partial credit for a partly right grid, say) is kept.
- **Scorers that accept anything.** `OWN_SCORERS` replace a dataset's scorer where it grades no answer:
  game_of_life_halting compared `bool(reply)` with `bool("False")`, so any non-empty reply scored 1.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reasoning_gym.dataset import ProceduralDataset  # type: ignore[import-untyped]
from reasoning_gym.factory import DATASETS  # type: ignore[import-untyped]

CONTAINMENT_CREDIT = {"codeio", "manipulate_matrix", "tsumego"}
"""Datasets with a custom scorer that also pays `len(answer) / len(reply)` for a reply containing the
answer (besides every dataset that keeps the default scorer, found by `pays_containment`)."""

HEDGE_NOTE = "the reply holds the answer among other text (a hedge, not an answer); scored 0"


def pays_containment(name: str) -> bool:
    """Whether dataset `name`'s scorer gives partial credit to any reply that contains the answer."""
    return name in CONTAINMENT_CREDIT or DATASETS[name][0].score_answer is ProceduralDataset.score_answer


def _squashed(text: str) -> str:
    return " ".join(text.split()).lower()


def is_hedge(answer: str | None, oracle: Any) -> bool:
    """Whether `answer` contains the item's answer and more (case and runs of spaces aside)."""
    if not isinstance(answer, str) or not isinstance(oracle, str) or not oracle.strip():
        return False
    said, right = _squashed(answer), _squashed(oracle)
    return right in said and said != right


def game_of_life_halting(answer: str | None, entry: dict[str, Any]) -> float:
    """1.0 when the reply is the item's truth value ("True"/"False", any case)."""
    return float(isinstance(answer, str) and answer.strip().lower() == str(entry["answer"]).strip().lower())


OWN_SCORERS: dict[str, Callable[[str | None, dict[str, Any]], float]] = {
    "game_of_life_halting": game_of_life_halting,
}


def score(dataset: ProceduralDataset, answer: str | None, entry: dict[str, Any]) -> tuple[float, str | None]:
    """The reply's score, and a note when envhub's rule, not the dataset's, decided it."""
    source = entry.get("metadata", {}).get("source_dataset", "")
    own = OWN_SCORERS.get(source)
    if own is not None:
        return own(answer, entry), None
    official = float(dataset.score_answer(answer, entry))
    paid = 0.0 < official < 1.0 and source in DATASETS and pays_containment(source)
    if paid and is_hedge(answer, entry.get("answer")):
        return 0.0, HEDGE_NOTE
    return official, None
