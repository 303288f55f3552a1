"""The HTML report's "wall time" is the batch's, not the sum of its episodes' times (issue 16.7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from envhub.messages import assistant, user
from envhub.records import Episode, Turn
from envhub.report import render_html
from envhub.report.html import batch_wall_seconds

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def ran(index: int, *, after: float, seconds: float) -> Episode:
    return Episode(
        episode_id=f"{index:06d}",
        env_id="arithmetic-v0",
        policy="scripted",
        prompt=[user("6 * 7?")],
        turns=[Turn(index=0, action=assistant("42"), observation=[], reward=1.0)],
        reward=1.0,
        terminated=True,
        started_at=START + timedelta(seconds=after),
        wall_seconds=seconds,
    )


def summary(html: str) -> str:
    return html.split('id="summary"')[1].split("</table>")[0]


def test_concurrent_episodes_count_once() -> None:
    # four episodes of 10 s, each started a second after the last: the batch ran 13 s, not 40 s
    episodes = [ran(i, after=i, seconds=10.0) for i in range(4)]
    table = summary(render_html(episodes, title="run"))
    assert "<tr><th>wall time</th><td>13.00 s</td></tr>" in table
    assert "<tr><th>episodes / s</th><td>0.3</td></tr>" in table  # 4 / 13


def test_the_pause_between_a_killed_run_and_its_resume_is_not_counted() -> None:
    first_run = [ran(0, after=0, seconds=5.0), ran(1, after=1, seconds=5.0)]
    resumed_an_hour_later = [ran(2, after=3600, seconds=4.0), ran(3, after=3602, seconds=4.0)]
    assert batch_wall_seconds(first_run + resumed_an_hour_later) == 6.0 + 6.0


def test_a_recorded_wall_time_wins_and_an_unknown_one_is_not_shown() -> None:
    episodes = [ran(i, after=i, seconds=10.0) for i in range(4)]
    assert "<td>20.00 s</td>" in summary(render_html(episodes, title="run", wall_seconds=20.0))
    unknown = [e.model_copy(update={"started_at": None}) for e in episodes]
    assert "wall time" not in summary(render_html(unknown, title="run"))
