"""`envhub play --images DIR --html FILE`: the screens an agent saw, as files a terminal user can open."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from envhub.cli import app

runner = CliRunner()


def test_play_saves_every_image_the_agent_saw_and_an_html_report(tmp_path: Path) -> None:
    folder = tmp_path / "screens"
    report = tmp_path / "episode.html"
    args = [
        "play",
        "vision",
        "--policy",
        "oracle",
        "--seed",
        "3",
        "--images",
        str(folder),
        "--html",
        str(report),
    ]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    saved = sorted(folder.iterdir())
    assert saved, result.output
    for path in saved:
        assert path.name in result.output  # the panel names the file it wrote
        with Image.open(path) as image:  # a real, readable picture
            image.verify()
    html = report.read_text()
    assert html.count("data:image/png;base64,") >= len(saved)
    assert f"{len(saved)} image(s) saved" in result.output


def test_play_without_images_writes_nothing(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["play", "vision", "--policy", "oracle", "--seed", "3"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "image(s) saved" not in result.output
    assert "[image]" not in result.output
