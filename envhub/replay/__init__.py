"""Record an episode's calls to the world outside its Python, and replay it against them without sandboxes.

    envhub rollout ID --record ...      # each episode keeps its tape (the `recording_json` column)
    envhub replay RUN --episode 3       # the same observations, the reward under today's code
    envhub rescore RUN                  # today's grader over a stored batch: a table of changed rewards

The recording is made by `envhub.sandbox.recording` (the hooks the sandbox, its Python worker and the
tool dispatcher share) and kept as `envhub.records.Recording`; `episode` replays one episode and
`rescore` a batch.
"""

from envhub.records import RecordedCall, Recording
from envhub.sandbox.recording import Divergence

__all__ = ["Divergence", "RecordedCall", "Recording"]
