"""Empty: `envhub swe` is a command plugin in envhub-swe (`envhub_swe.cli`), found through `envhub.commands`.

Kept only while envs/swe/tests/test_swe_validate.py and test_swe_prepare_env.py still `import envhub.cli.swe`
(which used to register the command); delete it together with those two import lines.
"""
