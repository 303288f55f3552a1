"""Computer use on a private X11 desktop in the local sandbox (issue 32)."""
