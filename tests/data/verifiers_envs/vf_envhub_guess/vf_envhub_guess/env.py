"""Guess a secret number from 1 to 20; the env answers "higher" or "lower" until the guess is right."""

from collections.abc import Iterator

import verifiers.v1 as vf

SECRETS = [7, 13, 2, 19]


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    pass


class GuessTaskset(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self) -> Iterator[GuessTask]:
        for secret in SECRETS:
            yield GuessTask(
                GuessData(prompt="Guess my number from 1 to 20. Reply with the number only.", secret=secret),
                self.config.task,
            )


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret = task.data.secret
        guesses = 0
        solved = False
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                guesses += 1
                try:
                    guess = int(segment.last_reply)
                except ValueError:
                    segment = await interaction.turn("Reply with a number only.")
                    continue
                if guess == secret:
                    solved = True
                    break
                segment = await interaction.turn("higher" if guess < secret else "lower")
        trace = interaction.trace
        trace.record_reward("solved", 1.0 if solved else 0.0, 1.0)
        trace.record_reward("efficiency", 1.0 / guesses if solved else 0.0, 0.5)
