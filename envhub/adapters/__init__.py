"""envhub envs inside other trainers: TRL's `GRPOTrainer` (`envhub.adapters.trl`) and SkyRL-Gym
(`envhub.adapters.skyrl`).

Each adapter imports its trainer's package only when used, so `import envhub` never needs TRL or SkyRL.
"""
