"""Test doubles that behave like the real thing: a scripted OpenAI-compatible server, tiny local models.

They live in the package, not in `tests/`, so that plugin authors and later test suites (the LLM judge,
the trainer) can reuse them.
"""
