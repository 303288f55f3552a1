"""Sandbox benchmark: plain subprocess vs the local backend vs Docker, side by side.

python benchmarks/sandbox.py [--iterations N] [--no-docker] [--image IMAGE]

The entry point is `envhub bench sandbox`; this script runs that same command (same options, same
table), and the measuring is `envhub/sandbox/bench.py`'s alone.
"""

from __future__ import annotations

import sys

from envhub.cli import app


def main() -> None:
    app(["bench", "sandbox", *sys.argv[1:]], prog_name="envhub")


if __name__ == "__main__":
    main()
