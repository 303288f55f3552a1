import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the tests share small helpers (test_swe_data.LITE)
