#!/usr/bin/env bash
# The sandbox, rollout and replay suites as on a shared host: two runs at once, then one beside a CPU hog
# that keeps every core busy. All must pass: no test there may depend on having the machine to itself (its
# cgroups, its processes, its timing). `make test` runs this after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITES=(tests/sandbox tests/rollout/test_runner.py tests/rollout/test_runner_limits.py
        tests/rollout/test_sandbox_death.py tests/cli/test_rollout_resume_after_kill.py tests/record/test_replay.py)
WORK="$(mktemp -d /tmp/envhub-shared-host.XXXXXX)"  # each run's own pytest folder and log
hogs=()
trap 'if ((${#hogs[@]})); then kill "${hogs[@]}" 2>/dev/null || true; fi' EXIT

suite() {  # suite NAME: one run of the suites; its log goes to $WORK/NAME.log
    .venv/bin/pytest -q -p no:cacheprovider --strict-skips --basetemp="$WORK/$1" "${SUITES[@]}" \
        >"$WORK/$1.log" 2>&1
}

failed=0
report() {  # report NAME STATUS
    if [ "$2" = 0 ]; then
        echo "shared host, $1: $(tail -n 1 "$WORK/$1.log")"
    else
        failed=1
        echo "shared host, $1 FAILED:" >&2
        grep -E '^(FAILED|ERROR)|^E ' "$WORK/$1.log" | head -n 40 >&2 || tail -n 40 "$WORK/$1.log" >&2
        tail -n 1 "$WORK/$1.log" >&2
    fi
}

suite concurrent-1 & first=$!
suite concurrent-2 & second=$!
status=0; wait "$first" || status=$?; report concurrent-1 "$status"
status=0; wait "$second" || status=$?; report concurrent-2 "$status"

for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    hogs+=($!)
done
status=0; suite beside-a-cpu-hog || status=$?; report beside-a-cpu-hog "$status"

[ "$failed" = 0 ] || echo "logs: $WORK" >&2
exit "$failed"
