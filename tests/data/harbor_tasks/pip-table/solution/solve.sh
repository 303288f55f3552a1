#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import csv

from tabulate import tabulate

with open("/app/planets.csv") as f:
    rows = list(csv.reader(f))
with open("/app/report.txt", "w") as f:
    f.write(tabulate(rows[1:], headers=rows[0], tablefmt="github") + "\n")
PY
