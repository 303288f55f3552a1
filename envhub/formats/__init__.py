"""Envs written in other projects' formats, made by id (`openenv:URL`, `verifiers:MODULE`, `harbor:PATH`)."""
