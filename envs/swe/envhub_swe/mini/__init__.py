"""swe-mini: tiny real repositories with SWE-bench-style issues, built into git bundles by build.py."""
