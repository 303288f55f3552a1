"""What envhub's own test suites share and plugin authors do not need: leak checks that read /proc and the
sandbox's internals.

Not shipped: `tests/` and `envs/*/tests` import it as `tests.envhub_testkit` (the root conftest.py keeps
the repository root on the path). What plugin authors may use is in `envhub.testing`.
"""
