"""Test doubles for plugin authors: real processes and models, not mocks (docs/authoring.md, "Testing").

- `openai_server.OpenAIServer`: an OpenAI-compatible server process with scripted replies and faults,
  to test an LLM judge or a model-backed policy without a model;
- `reward_server.RewardServer`: a reward model served over envhub's scoring protocol;
- `tiny_model.tiny_chat_model`, `tiny_reward_model.tiny_reward_model`: two-layer models built on the spot
  (nothing downloaded), for tests that need a real transformers model.

What only envhub's own suites use lives in `tests/envhub_testkit`, outside the package.
"""
