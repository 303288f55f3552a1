"""One textarena game as a multi-turn envhub env: the agent plays seat 0, built-in opponents the rest."""

from __future__ import annotations

import random
from typing import Any, ClassVar

import envhub
from envhub.messages import Message
from envhub_textarena.game_record import Game
from envhub_textarena.opponents import OPPONENTS, Opponent
from envhub_textarena.seeding import GlobalRandom

AGENT = 0
GAME_ID = -1
DEFAULT_MAX_TURNS = 200
"""envhub's turn cap; the games end themselves well before it, except when an agent stalls."""
MAX_OPPONENT_MOVES = 10_000
INVALID_MOVE_LOSS = -1.0
"""textarena's reward for a seat that loses on invalid moves (`set_invalid_move`, one or two players)."""
CUT_OFF = INVALID_MOVE_LOSS
"""The reward of a game envhub's `max_turns` cut short: a loss. It was 0, above the -1 of losing, so an
agent about to lose could stall to the limit and earn more (poker, santorini and settlers let garbage
moves go on for 200 turns). No textarena game pays its seat less than -1, so stalling never beats
playing on; single-player games, which pay 0 or more for a failed attempt, rank it below any attempt."""
CUT_OFF_NOTE = f"envhub's turn limit cut the game short; scored {CUT_OFF:g}, as a loss"


class GameUnavailable(RuntimeError):
    """This textarena game cannot run here (it needs the network, an external model, missing data)."""


class TextArenaGame(envhub.MultiTurnEnv):
    """A textarena game: each reply is the agent's move, answered by what the game and opponents did.

    The reward is the game's own reward for the agent's seat, as textarena scores it: 1 win, 0 draw,
    -1 loss in the competitive games, the game's own score in the single-player ones. An episode cut
    short by `max_turns` before the game ends scores a loss, -1 (`finished` records 0 then, and
    `info["reward_notes"]` says why), so stalling never pays more than losing.
    """

    game: ClassVar[Game]

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return cls.game.reason

    def __init__(self, opponent: str = "random", *, max_turns: int | None = None) -> None:
        if self.game.reason is not None:
            raise GameUnavailable(f"{self.game.env_id} is unavailable: {self.game.reason}")
        if opponent not in OPPONENTS:
            raise ValueError(f"opponent must be one of {sorted(OPPONENTS)}, got {opponent!r}")
        super().__init__(max_turns=max_turns if max_turns is not None else DEFAULT_MAX_TURNS)
        self.opponent_name = opponent
        self.ta_env: Any = None
        self.base: Any = None
        self.rewards: dict[int, float] | None = None
        self.ending = ""
        self.reward_notes: dict[str, str] = {}

    def setup(self, rng: random.Random) -> str:
        import textarena  # type: ignore[import-untyped]

        self.random = GlobalRandom(rng.randrange(2**31))
        self.opponent: Opponent = OPPONENTS[self.opponent_name](random.Random(rng.randrange(2**63)))
        self.seen: dict[int, list[str]] = {}
        self.rewards, self.ending = None, ""
        self.reward_notes = {}
        with self.random.active():
            self.ta_env = textarena.make(self.game.textarena_id)
            self.ta_env.reset(num_players=self.game.players, seed=self.random.seed)
            self.base = self.ta_env  # observations unformatted: envhub renders them; moves go through
            while isinstance(self.base, textarena.Wrapper):  # the game's own action wrappers (brackets)
                self.base = self.base.env
            return self.advance(done=False)

    def respond(self, text: str) -> str | envhub.Reply:
        with self.random.active():
            done, _ = self.ta_env.step(text)
            answer = self.forfeit() if not done and self.stuck() else self.advance(done)
        if self.rewards is not None:
            return envhub.Reply(text=answer, done=True)
        return answer

    def advance(self, done: bool) -> str:
        """Let the opponents move until it is the agent's turn or the game is over; what the agent sees."""
        moves = 0
        while not done and self.ta_env.state.current_player_id != AGENT:
            player_id, observation = self.base.get_observation()
            self.seen.setdefault(player_id, []).extend(text for _, text, _ in observation)
            move = self.opponent.act(self.ta_env, player_id, "\n".join(self.seen[player_id][-40:]))
            done, _ = self.ta_env.step(move)
            moves += 1
            if moves > MAX_OPPONENT_MOVES:
                raise RuntimeError(f"{self.game.textarena_id}: the opponents made {moves} moves in a row")
        if done:
            return self.finish()
        _, observation = self.base.get_observation()
        return self.render(observation)

    def stuck(self) -> bool:
        """Whether every seat is eliminated and the game not over: textarena's next step would look
        for a player left to move for ever (market-entry-game, after two invalid moves of its one seat),
        so an agent could hang the step, and escape its score, by playing invalid moves."""
        eliminated = set(getattr(self.ta_env.state, "elimination_order", ()) or ())
        return eliminated >= set(range(self.game.players))

    def forfeit(self) -> str:
        """End a game textarena cannot go on with: the agent, eliminated for its invalid moves, gets
        textarena's reward for losing on invalid moves."""
        pending = self.ta_env.state.observations.get(AGENT, [])
        self.rewards = {AGENT: INVALID_MOVE_LOSS}
        self.ending = "every seat was eliminated for invalid moves, so the game cannot go on"
        return (
            self.render(pending) + f"\n[GAME] Game over: {self.ending}. Your reward: {INVALID_MOVE_LOSS:g}."
        )

    def finish(self) -> str:
        pending = self.ta_env.state.observations.get(AGENT, [])
        rewards, game_info = self.ta_env.close()
        self.rewards = {int(p): float(r) for p, r in (rewards or {}).items()}
        reason = (game_info or {}).get(AGENT, {}).get("reason") or "the game is over"
        self.ending = str(reason)
        reward = self.rewards.get(AGENT, 0.0)
        return self.render(pending) + f"\n[GAME] Game over: {reason} Your reward: {reward:g}."

    def render(self, observation: list[tuple[int, str, Any]]) -> str:
        """The game's messages since the agent's last move, tagged by sender as textarena's wrapper does."""
        roles = self.ta_env.state.role_mapping
        lines = []
        for sender, text, _ in observation:
            if sender == AGENT:
                continue  # the agent's own move, already in the conversation
            name = "GAME" if sender == GAME_ID else roles.get(sender, f"Player {sender}")
            lines.append(f"[{name}] {text}")
        return "\n".join(lines).strip() or "[GAME] (no new messages)"

    @envhub.reward
    def outcome(self) -> float:
        """The game's own reward for the agent's seat; a loss (`CUT_OFF`) when the game did not finish."""
        if self.rewards is None:
            self.reward_notes["outcome"] = CUT_OFF_NOTE
            return CUT_OFF
        return self.rewards.get(AGENT, 0.0)

    @envhub.reward(weight=0.0)
    def finished(self) -> float:
        """Recorded, not rewarded: whether the game itself ended (1) or envhub's max_turns cut it (0)."""
        return float(self.rewards is not None)

    def reference_action(self, messages: list[Message]) -> envhub.Action | None:
        from envhub_textarena.solvers import SOLVERS

        solver = SOLVERS.get(self.game.textarena_id.partition("-v0")[0])
        return None if solver is None or self.ta_env is None else solver(self.ta_env)
