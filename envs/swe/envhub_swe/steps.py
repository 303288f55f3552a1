"""What a set-up plan is made of: one step, and the error for an instance no venv here can reproduce.

Its own module because both `specs` (the harness's scripts, adapted line by line) and `conda_env` (an
`environment.yml` translated for pip) produce steps, and `specs` uses `conda_env`: with the two types in
`specs`, the two modules imported each other.
"""

from __future__ import annotations

from dataclasses import dataclass


class NoSpec(RuntimeError):
    """The official harness has no environment for this instance that a venv here can reproduce."""


@dataclass(frozen=True)
class Step:
    """One line of the official set-up scripts, as prepare runs it (or why it does not)."""

    command: str
    run: bool = True
    note: str = ""
    """How the official line was adapted, or why it is skipped."""
