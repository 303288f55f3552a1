#!/bin/bash
# Several named rewards in /logs/verifier/reward.json; "reward" is the episode's.
exists=0; executable=0; output=0
[ -f /app/hello.sh ] && exists=1
[ -x /app/hello.sh ] && executable=1
[ "$executable" -eq 1 ] && [ "$(/app/hello.sh)" = "$GREETING" ] && output=1
reward=$(( exists * executable * output ))
printf '{"reward": %d, "exists": %d, "executable": %d, "output": %d}\n' \
  "$reward" "$exists" "$executable" "$output" > /logs/verifier/reward.json
