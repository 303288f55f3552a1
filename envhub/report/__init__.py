"""Reports over recorded episodes, for reading a rollout away from the terminal."""

from envhub.report.html import render_html, write_html_report

__all__ = ["render_html", "write_html_report"]
