"""A plugin whose import fails, as a plugin with a missing dependency would."""

import envhub_missing_dependency_for_tests  # noqa: F401
