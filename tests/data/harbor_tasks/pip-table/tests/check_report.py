import csv
import sys

from tabulate import tabulate

with open("/app/planets.csv") as f:
    rows = list(csv.reader(f))
expected = tabulate(rows[1:], headers=rows[0], tablefmt="github").strip()
try:
    with open("/app/report.txt") as f:
        actual = f.read().strip()
except FileNotFoundError:
    sys.exit("no /app/report.txt")
print(actual)
sys.exit(0 if actual == expected else 1)
