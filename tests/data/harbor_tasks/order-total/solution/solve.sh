#!/bin/bash
set -euo pipefail
python3 -c "
import csv
with open('/data/orders.csv') as f:
    total = sum(float(row['amount']) for row in csv.DictReader(f))
open('/app/total.txt', 'w').write(f'{total:.2f}\n')
"
