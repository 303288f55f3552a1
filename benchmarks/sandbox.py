"""Sandbox benchmark: plain subprocess vs the local backend vs Docker, side by side.

python benchmarks/sandbox.py [--iterations N] [--no-docker]      (same as `envhub bench sandbox`)
"""

from __future__ import annotations

import argparse

from rich.console import Console

from envhub.sandbox.bench import run_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--no-docker", action="store_true", help="skip Docker even when an engine is present")
    parser.add_argument("--image", default=None, help="Docker image (default envhub/python:3-bookworm)")
    args = parser.parse_args()
    docker = False if args.no_docker else None
    Console().print(run_benchmark(args.iterations, docker=docker, image=args.image))


if __name__ == "__main__":
    main()
