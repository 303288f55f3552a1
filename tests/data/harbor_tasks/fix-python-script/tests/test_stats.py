import sys

sys.path.insert(0, "/app")
from stats import median

cases = [([3], 3), ([1, 2], 1.5), ([5, 1, 3], 3), ([4, 1, 3, 2], 2.5), ([7, 7, 1, 9, 2, 8], 7)]
failed = [
    (values, expected, median(list(values))) for values, expected in cases if median(list(values)) != expected
]
for values, expected, got in failed:
    print(f"median({values}) = {got}, expected {expected}")
sys.exit(1 if failed else 0)
