"""`python -m envhub` runs the command line, for environments where the script is not on PATH."""

from envhub.cli import app

app()
