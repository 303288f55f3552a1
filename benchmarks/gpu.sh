#!/usr/bin/env bash
# The GPU figures, in one device call: the trainer against TRL on CUDA in bf16 (same model, batch, loss),
# then the sandbox and rollout throughput of the larger machine. Planned to end inside the device tool's
# 10-minute command limit; each step has its own timeout and a failed step does not stop the others.
#
#   bash benchmarks/gpu_prepare.sh               # here, first: fills .gpu/ (see that script)
#   device run: bash benchmarks/gpu.sh           # carry [".gpu"]; logs, JSON and a summary under $OUT
#   bash benchmarks/gpu.sh --dry-run             # the plan and its time budget; runs nothing
#
# Both trainers generate with vLLM on CUDA (ours in-process, TRL in colocate mode). vLLM was not in that
# machine's image as last seen (KINDS.md) and its CUDA wheel is far over the carry limit: then the step
# says so and exits 3, and the sandbox and rollout figures are still taken.
set -uo pipefail
cd "$(dirname "$0")/.."
BUDGET_S=570  # the device tool kills a command at 600 s; keep room for the transfer back
OUT="${OUT:-$PWD/gpu-out}"
PY="${PY:-python3}"
SITE=/tmp/envhub-gpu-site
MODEL=/tmp/smollm2-random
STEPS="${GPU_STEPS:-5}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE:$PWD:$PWD/trainer:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/envhub-gpu-deb/usr/bin:$PATH" LD_LIBRARY_PATH="/tmp/envhub-gpu-deb/usr/lib/x86_64-linux-gnu:/tmp/envhub-gpu-deb/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# name | timeout (s) | command
STEPS_PLAN=(
    "machine|20|nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g | head -2; $PY -c 'import torch, transformers; print(torch.__version__, torch.cuda.is_available(), transformers.__version__)'"
    "install|60|mkdir -p $SITE /tmp/envhub-gpu-deb && $PY -m pip install -q --no-index --no-deps --no-compile --target $SITE .gpu/whl/*.whl && for d in .gpu/deb/*.deb; do [ -e \"\$d\" ] && dpkg -x \"\$d\" /tmp/envhub-gpu-deb; done; $PY -c 'import envhub, envhub_trainer, trl; print(\"envhub\", envhub.__file__, \"trl\", trl.__version__)'"
    "model|60|$PY benchmarks/gpu_model.py .gpu/smollm2-shape $MODEL"
    "trainer_vs_trl|330|$PY -c 'import vllm' || { echo 'vLLM is not importable here: carry a CUDA vLLM build to measure the trainer against TRL'; exit 3; }; $PY benchmarks/trainer_vs_trl.py --device cuda --dtype bfloat16 --steps $STEPS --model $MODEL --threads 8 --out $OUT/trainer_vs_trl.json"
    "sandbox|60|command -v bwrap && $PY -m envhub bench sandbox --no-docker --iterations 30"
    "rollout|40|$PY benchmarks/rollout.py --episodes 2000 --sandbox-episodes 0 --concurrency 1 16 64"
)

plan_total() { local t=0 s; for s in "${STEPS_PLAN[@]}"; do t=$((t + $(cut -d'|' -f2 <<<"$s"))); done; echo "$t"; }

if [ "${1:-}" = "--dry-run" ]; then
    printf '%-16s %8s  %s\n' step timeout command
    for s in "${STEPS_PLAN[@]}"; do
        IFS='|' read -r name limit command <<<"$s"
        printf '%-16s %7ss  %s\n' "$name" "$limit" "$command"
    done
    total=$(plan_total)
    echo "total of the timeouts: ${total} s (budget ${BUDGET_S} s)"
    [ "$total" -le "$BUDGET_S" ] || { echo "the plan is over its budget: shorten a step" >&2; exit 1; }
    exit 0
fi

mkdir -p "$OUT"
summary="$OUT/summary.tsv"
printf 'step\trc\tseconds\n' > "$summary"
for s in "${STEPS_PLAN[@]}"; do
    IFS='|' read -r name limit command <<<"$s"
    echo "=== $name (at most ${limit} s)"
    started=$(date +%s)
    timeout --kill-after=5 "$limit" bash -c "$command" > "$OUT/$name.log" 2>&1
    rc=$?
    tail -n 40 "$OUT/$name.log"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - started ))" >> "$summary"
done
echo "=== summary (rc 124: the step ran out of its time)"
column -t "$summary" 2>/dev/null || cat "$summary"
