"""Empty: `envhub train` and `envhub report` are command plugins in envhub-trainer (`envhub_trainer.cli`).

Kept only while trainer/tests/test_train_cli.py still `import envhub.cli.train` (which used to register
the commands); delete it together with that import.
"""
