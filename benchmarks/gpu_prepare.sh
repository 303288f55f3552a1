#!/usr/bin/env bash
# Run here, once, before a lent GPU machine is used: puts into .gpu/ (git-ignored, under the device tool's
# 64 MiB carry limit; .gitignore names it) what its bare image lacks for benchmarks/gpu.sh:
#   .gpu/whl/   pure-Python and cp312 wheels envhub, its trainer and TRL need there (its image has torch,
#               transformers, accelerate, pyarrow, rich, typer, httpx, but not pydantic, trl or datasets)
#   .gpu/deb/   Debian's bubblewrap, unpacked there under /tmp for the sandbox figures
#   .gpu/smollm2-shape/  SmolLM2-135M-Instruct's config, tokenizer and chat template WITHOUT its weights
#               (517 MB do not fit a carry): gpu.sh builds a random-weight model of the same shape there,
#               so step times and tokens/s are the real model's, rewards are not
# Then: device run `bash benchmarks/gpu.sh` with carry [".gpu"].
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
rm -rf .gpu && mkdir -p .gpu/whl .gpu/deb .gpu/smollm2-shape

# Versions as in this project's venvs (trl as `make bench-trl` pins it).
WHEELS=(
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    tenacity==9.2.1 docstring_parser==0.18.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/whl "${WHEELS[@]}"

(cd .gpu/deb && apt-get download bubblewrap libcap2 2>/dev/null) || echo "no bubblewrap .deb: gpu.sh skips the sandbox figures"

MODEL="$("$PY" -c 'from envhub_trainer.models import smollm2_dir; print(smollm2_dir())')"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    [ -f "$MODEL/$f" ] && cp "$MODEL/$f" .gpu/smollm2-shape/
done
du -sh .gpu
