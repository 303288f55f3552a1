"""A Ray-served policy records how it sampled, as every policy does (issue 31: policy_info_json said
only its name)."""

from __future__ import annotations

from envhub_trainer.remote_policy import RemotePolicy


def test_a_remote_policy_records_its_sampling_mode_and_engines() -> None:
    info = RemotePolicy((object(), object()), greedy=True, name="grpo").info()
    assert info == {"name": "grpo", "engine": "remote", "greedy": True, "engines": 2}
