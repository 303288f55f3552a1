"""A model of a real model's shape with random weights, from its config and tokenizer files alone.

    python benchmarks/gpu_model.py SHAPE_DIR OUT_DIR [--dtype bfloat16]

benchmarks/gpu.sh runs it on a lent GPU machine, where SmolLM2-135M-Instruct's 517 MB of weights cannot
travel: step times, tokens/s and memory depend on the shape, not the values, so the trainer figures are
the real model's; the rewards are not, and the summary says so.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def build(shape: Path, out: Path, dtype: str) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(shape, local_files_only=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=getattr(torch, dtype))  # type: ignore[no-untyped-call]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in shape.iterdir():  # tokenizer, chat template, generation config: as shipped
        if path.name != "config.json":
            shutil.copy(path, out / path.name)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{config.model_type} with {parameters / 1e6:.1f}M random parameters ({dtype}) in {out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", type=Path, help="a folder with config.json and the tokenizer files")
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    build(args.shape, args.out, args.dtype)


if __name__ == "__main__":
    main()
