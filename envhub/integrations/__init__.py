"""Other projects' envs and trainers, both ways: their formats made as envhub envs, envhub's envs driven
by them (gymnasium, TRL, SkyRL, OpenEnv, verifiers, Harbor)."""
