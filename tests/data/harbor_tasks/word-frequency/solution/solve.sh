#!/bin/bash
set -euo pipefail
cat > /app/wordfreq.py <<'PY'
import collections
import re
import sys

with open(sys.argv[1]) as f:
    words = re.findall(r"[a-z]+", f.read().lower())
counts = collections.Counter(words)
for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:3]:
    print(word, count)
PY
