#!/bin/bash
# The program is run on inputs the agent never saw; its output must match exactly.
status=0
for case in /tests/cases/*.txt; do
  expected="${case%.txt}.expected"
  if ! diff <(python3 /app/wordfreq.py "$case") "$expected"; then
    status=1
  fi
done
if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
