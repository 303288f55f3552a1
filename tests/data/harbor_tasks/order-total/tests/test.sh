#!/bin/bash
if [ "$(cat /app/total.txt 2>/dev/null)" = "35.49" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
