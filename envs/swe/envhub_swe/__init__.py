"""SWE-bench Lite and swe-mini for envhub: see docs/swe.md."""
