"""Print the `[project.entry-points."envhub.envs"]` block for gymnasium's toy-text ids.

    .venv/bin/python envs/gym_text/tools/entry_points.py

Paste its output over the block in envs/gym_text/pyproject.toml after a gymnasium upgrade;
tests/test_gymtext_ids.py fails until the two agree.
"""

from envhub_gym_text.as_text import toy_text_ids

print('[project.entry-points."envhub.envs"]')
for gym_id in toy_text_ids():
    print(f'"gym/{gym_id}" = "envhub_gym_text.toy_text:{gym_id.replace("-", "_")}"')
