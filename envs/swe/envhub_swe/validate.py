"""Check a dataset against its own grader: each gold patch must resolve, and an empty patch must not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from envhub_swe.data import Instance
from envhub_swe.runtime import RuntimeKind, grade, mini_runtime, mini_workspace


class Validation(BaseModel):
    model_config = ConfigDict(frozen=True)

    instance_id: str
    gold_resolved: bool
    empty_resolved: bool
    gold_summary: str
    empty_summary: str
    duration_s: float
    gold_canary: str = ""
    empty_canary: str = ""

    @property
    def canary(self) -> str:
        """Both runs' canaries: `passed`, `void: canary` if either was tampered with, or why none ran."""
        outcomes = {self.gold_canary, self.empty_canary}
        if "void" in outcomes:
            return "void: canary"
        return self.gold_canary if len(outcomes) == 1 else f"{self.gold_canary} / {self.empty_canary}"

    @property
    def ok(self) -> bool:
        return self.gold_resolved and not self.empty_resolved


async def validate(
    instances: Sequence[Instance],
    *,
    dataset: str = "swe-mini",
    runtime: RuntimeKind = "local",
    workspaces: str | None = None,
    concurrency: int = 2,
    on_done: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Grade the gold and the empty patch of every instance, `concurrency` instances at a time."""
    from pathlib import Path

    from envhub_swe.prepare import prepared

    gate = asyncio.Semaphore(concurrency)

    async def one(instance: Instance) -> Validation:
        async with gate:
            ws: Path | None
            if dataset == "swe-mini":
                rt, ws = mini_runtime(runtime), await asyncio.to_thread(mini_workspace, instance)
            else:
                root = Path(workspaces) if workspaces else None
                rt, ws = await asyncio.to_thread(prepared, instance, root, runtime)
            gold = await grade(instance, instance.patch, rt, ws)
            empty = await grade(instance, "", rt, ws)
            result = Validation(
                instance_id=instance.instance_id,
                gold_resolved=gold.resolved,
                empty_resolved=empty.resolved,
                gold_summary=gold.summary(),
                empty_summary=empty.summary(),
                duration_s=round(gold.duration_s + empty.duration_s, 2),
                gold_canary=gold.canary,
                empty_canary=empty.canary,
            )
            if on_done is not None:
                on_done(result)
            return result

    return list(await asyncio.gather(*(one(i) for i in instances)))
