"""The tape's one home: record an episode's calls to the world outside its Python, and replay it.

    envhub rollout ID --record ...      # each episode keeps its tape (the `recording_json` column)
    envhub replay RUN --episode 3       # the same observations, the reward under today's code
    envhub rescore RUN                  # today's grader over a stored batch: a table of changed rewards

Its modules sit in the layers their jobs need (envhub/layers.py): `calls` (the recording's types, which
an `Episode` carries) and `tape` (the tape, its context and the entropy a grader draws) in the contract,
where `make()`'s recording wrapper reaches them; `sandbox_calls` (the hooks in every sandbox backend and
its Python worker) and `stand_in` (the sandbox a replay gets) beside the sandboxes; `seal` (the
recording's MAC and the grader's derived secrets), `replay` (one episode), `rescore` and `regrade` (a
stored batch) in the runner layer. So this package imports none of them: importing one module of it
loads no layer above that module's.
"""
