"""A second plugin claiming an id the good plugin already provides."""

from envhub_testplugin_good import Echo as Other

__all__ = ["Other"]
