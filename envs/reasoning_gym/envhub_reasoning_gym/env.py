"""One envhub environment per Reasoning Gym dataset: the question is the prompt, the dataset scores the reply.

Reasoning Gym (https://github.com/open-thought/reasoning-gym) generates each dataset's items from a
config dataclass: `size`, `seed` and the dataset's difficulty knobs. `env_class(name)` builds a
`SingleTurnEnv` whose constructor takes exactly that config's fields, so `envhub info` shows them and the
rollout's option check reads their types. Episode seed `s` plays item `s % size` of the dataset Reasoning
Gym builds from those options (`reasoning_gym.create_dataset(name, **options)[s % size]`), so seeds
0..size-1 are the dataset's own items, in its order.

The reply is read the way Reasoning Gym's own evaluation reads it: the text of the last
`<answer>...</answer>` block (`reasoning_gym.utils.extract_answer`; no block gives `None`), scored by the
dataset's own `score_answer`, except where `guards` must differ (hedges, a scorer that passes anything).
The system prompt, one of Reasoning Gym's `SYSTEM_PROMPTS`, asks for it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import random
import threading
import typing
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError
from reasoning_gym.dataset import ProceduralDataset  # type: ignore[import-untyped]
from reasoning_gym.factory import DATASETS  # type: ignore[import-untyped]
from reasoning_gym.induction.list_functions import generators  # type: ignore[import-untyped]
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer  # type: ignore[import-untyped]

import envhub
from envhub.messages import Message
from envhub_reasoning_gym import guards, solvers

NAMESPACE = "reasoning-gym"
MODULE = "envhub_reasoning_gym.datasets"
"""Where the entry points find the classes (`envhub_reasoning_gym.datasets:<name>`)."""
DEFAULT_SEED = 0
"""Reasoning Gym's own default is a random seed per dataset object; envhub's episodes must replay, so the
dataset seed is fixed unless the `seed` option says otherwise."""
DEFAULT_SYSTEM_PROMPT = "default"

EXAMPLE_ANSWER_KEYS = {
    "graph_color": "possible_answer",
    "propositional_logic": "example_answer",
    "rubiks_cube": "example_correct_answer",
}
"""Datasets whose items have no single right answer (`answer` is None): the metadata key where the
dataset keeps one correct example, which the oracle plays instead."""

COMPOSITE_EXAMPLE = 'datasets=[{"name": "chain_sum", "weight": 1, "config": {}}]'


UNSEEDED_HELPERS = random.Random()
"""reasoning-gym 0.1.25's list_functions draws some numbers (`generators.create_random_odd_numbers`) from
the global `random` module, not the item's own Random, so 31 of its first 500 items differ on every
generation. Its module's `random` name is bound to this Random instead, reseeded from (dataset, seed,
index) before each item is generated: the same distribution, but the same item every time."""
generators.random = UNSEEDED_HELPERS
_GENERATING = threading.Lock()


def generate(dataset: ProceduralDataset, name: str, index: int) -> dict[str, Any]:
    """Item `index` of `dataset`, the same on every call (see `UNSEEDED_HELPERS`)."""
    with _GENERATING:
        UNSEEDED_HELPERS.seed(f"{name}:{dataset.seed}:{index}")
        return dict(dataset[index])


def env_id(name: str) -> str:
    """The envhub id of a Reasoning Gym dataset: `reasoning-gym/<name>-v0`."""
    return f"{NAMESPACE}/{name}-v0"


def dataset_names() -> list[str]:
    """Every dataset the installed `reasoning-gym` registers, sorted."""
    return sorted(DATASETS)


@dataclasses.dataclass(frozen=True)
class Option:
    """One constructor option: a field of the dataset's config dataclass (or envhub's `system_prompt`)."""

    name: str
    hint: Any
    """The type values are checked and converted against (the field's own, unless its default
    contradicts it: then `Optional` of it for a None default, else `Any`)."""
    default: Any

    @functools.cached_property
    def adapter(self) -> TypeAdapter[Any] | None:
        try:
            return TypeAdapter(self.hint, config=ConfigDict(arbitrary_types_allowed=True))
        except (PydanticSchemaGenerationError, PydanticUserError):
            return None  # a type pydantic cannot describe: passed through as given

    def fits(self, value: Any) -> bool:
        if self.adapter is None:
            return True
        try:
            self.adapter.validate_python(value)
        except ValidationError:
            return False
        return True

    def convert(self, value: Any) -> Any:
        """The value in the field's type (a JSON list for a tuple field becomes a tuple); raises
        `ValidationError` when it does not fit."""
        return value if self.adapter is None else self.adapter.validate_python(value)


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


@functools.cache
def options(name: str) -> dict[str, Option]:
    """The options of dataset `name`'s environment: its config's fields, then `system_prompt`."""
    config_cls = DATASETS[name][1]
    hints = typing.get_type_hints(config_cls)
    found: dict[str, Option] = {}
    for field in dataclasses.fields(config_cls):
        default = DEFAULT_SEED if field.name == "seed" else _field_default(field)
        option = Option(field.name, int if field.name == "seed" else hints[field.name], default)
        if default is not inspect.Parameter.empty and not option.fits(default):
            hint = Any if default is not None else option.hint | None
            option = Option(field.name, hint, default)
        found[field.name] = option
    found["system_prompt"] = Option("system_prompt", str | None, DEFAULT_SYSTEM_PROMPT)
    return found


def reference_answer(entry: dict[str, Any]) -> str | None:
    """The item's reference answer as a reply would write it: `answer`, else the dataset's example
    solution for items without a single right answer, else envhub's solver (rush_hour, boxnet)."""
    answer = entry.get("answer")
    metadata = entry.get("metadata", {})
    source = metadata.get("source_dataset", "")
    if answer is None and source in EXAMPLE_ANSWER_KEYS:
        answer = metadata.get(EXAMPLE_ANSWER_KEYS[source])
    if answer is None:
        answer = solvers.solve(source, metadata)
    if answer is None or isinstance(answer, str):
        return answer
    return json.dumps(answer) if isinstance(answer, dict | list) else str(answer)


class ReasoningGymEnv(envhub.SingleTurnEnv):
    """Base of the per-dataset classes `env_class(name)` builds; not registered itself."""

    dataset_name: ClassVar[str] = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        values = self._checked(kwargs)
        style = values.pop("system_prompt", DEFAULT_SYSTEM_PROMPT)
        self.system_prompt = None if style is None else SYSTEM_PROMPTS[style]
        values.setdefault("seed", DEFAULT_SEED)
        self.dataset: ProceduralDataset = self._build(values)
        self.index = 0
        self.entry: dict[str, Any] = {}
        self.reward_notes: dict[str, str] = {}
        self._scored: tuple[str, float] | None = None
        """The last reply scored and its score: `score` and `partial_credit` grade it once."""

    @classmethod
    def _checked(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The options converted to their fields' types; a wrong name or type is a `TypeError` that says
        what the dataset takes."""
        known = options(cls.dataset_name)
        values: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key not in known:
                raise TypeError(
                    f"{env_id(cls.dataset_name)} has no option {key!r}; its options: "
                    f"{', '.join(known)} (see `envhub info {env_id(cls.dataset_name)}`)"
                )
            try:
                values[key] = known[key].convert(value)
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"]
                raise TypeError(
                    f"{env_id(cls.dataset_name)}: option {key}={value!r} does not fit its type "
                    f"{known[key].hint}: {reason}"
                ) from None
        if values.get("size", 1) < 1:  # not every config checks it, and episode seed s plays item s % size
            raise ValueError(f"{env_id(cls.dataset_name)}: size must be at least 1, got {values['size']}")
        style = values.get("system_prompt", DEFAULT_SYSTEM_PROMPT)
        if style is not None and style not in SYSTEM_PROMPTS:
            raise ValueError(
                f"{env_id(cls.dataset_name)}: system_prompt={style!r} is not one of Reasoning Gym's "
                f"prompts; choose one of {sorted(SYSTEM_PROMPTS)}, or None for no system prompt"
            )
        return values

    @classmethod
    def _build(cls, values: dict[str, Any]) -> ProceduralDataset:
        """The dataset exactly as `reasoning_gym.create_dataset(name, **values)` builds it."""
        dataset_cls, config_cls = DATASETS[cls.dataset_name]
        try:
            return dataset_cls(config=config_cls(**values))
        except (AssertionError, ValueError) as exc:  # the config's own validate() refused a value
            hint = f"; for example {COMPOSITE_EXAMPLE}" if cls.dataset_name == "composite" else ""
            raise ValueError(
                f"{env_id(cls.dataset_name)} refused its options: {exc or type(exc).__name__}{hint}"
            ) from exc

    @property
    def size(self) -> int:
        return int(self.dataset.size)

    def setup(self, rng: random.Random) -> str:
        assert self.seed is not None  # reset() sets it before setup()
        self.index = self.seed % self.size
        self.entry = generate(self.dataset, self.dataset_name, self.index)
        self.reward_notes = {}
        self._scored = None
        return str(self.entry["question"])

    def reset_info(self) -> dict[str, Any]:
        return {"dataset": self.dataset_name, "index": self.index, "dataset_seed": self.dataset.seed}

    @envhub.reward
    def score(self, answer: str) -> float:
        """Reasoning Gym's own score_answer for the reply's last <answer> block (None without one), except
        where `guards` says otherwise: a hedge scores 0, a scorer that accepts anything is replaced, and
        in `guards.FULL_MARKS_ONLY` (partial credit that pays constants) only full marks count."""
        value = self.partial_credit(answer)
        source = self.entry.get("metadata", {}).get("source_dataset", self.dataset_name)
        return value if value >= 1.0 or source not in guards.FULL_MARKS_ONLY else 0.0

    @envhub.reward(weight=0.0)
    def partial_credit(self, answer: str) -> float:
        """Recorded: the dataset's own score under envhub's guards, partial credit included (the reward
        where the dataset is not in `guards.FULL_MARKS_ONLY`)."""
        if self._scored is not None and self._scored[0] == answer:
            return self._scored[1]
        try:
            value, note = guards.score(self.dataset, extract_answer(answer), self.entry)
        except Exception as exc:  # the dataset's scorer crashed on this reply: a wrong answer, not an env bug
            self.reward_notes["score"] = f"score_answer raised {type(exc).__name__}: {exc}; scored 0"
            value, note = 0.0, None
        if note is not None:
            self.reward_notes["score"] = note
        self._scored = (answer, value)
        return value

    @envhub.reward(weight=0.0)
    def answer_tagged(self, answer: str) -> float:
        """Recorded, not rewarded: whether the reply had an <answer> block at all."""
        return float(extract_answer(answer) is not None)

    def reference_action(self, messages: list[Message]) -> envhub.Action | None:
        reference = reference_answer(self.entry)
        return None if reference is None else f"<answer>{reference}</answer>"


def _docstring(name: str) -> str:
    dataset_cls = DATASETS[name][0]
    summary = (inspect.getdoc(dataset_cls) or "").strip().splitlines()
    what = summary[0].rstrip(".") if summary else "a procedural reasoning dataset"
    return (
        f"Reasoning Gym's {name} dataset: {what}. One question, the last <answer> block scored by the "
        "dataset's own score_answer."
    )


@functools.cache
def env_class(name: str) -> type[ReasoningGymEnv]:
    """The environment class of Reasoning Gym's dataset `name`, with the config's fields as its options."""
    if name not in DATASETS:
        raise KeyError(f"reasoning-gym {_version()} has no dataset {name!r}; its datasets: {dataset_names()}")
    parameters = [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.hint)
        for o in options(name).values()
    ]
    init = _constructor()
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    setattr(init, "__signature__", inspect.Signature([self_parameter, *parameters]))  # noqa: B010
    init.__annotations__ = {p.name: p.annotation for p in parameters}
    namespace = {
        "__init__": init,
        "__doc__": _docstring(name),
        "__module__": MODULE,
        "__qualname__": name,
        "dataset_name": name,
    }
    return type(name, (ReasoningGymEnv,), namespace)


def _constructor() -> Callable[..., None]:
    """A fresh `__init__` per class, so each carries its own signature and type hints."""

    def __init__(self: ReasoningGymEnv, **kwargs: Any) -> None:
        ReasoningGymEnv.__init__(self, **kwargs)

    return __init__


@functools.cache
def _version() -> str:
    from importlib.metadata import version

    return version("reasoning-gym")
