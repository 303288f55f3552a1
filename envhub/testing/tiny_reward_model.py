"""A tiny sequence-classification reward model built on the spot, for tests that cannot download one.

Its weights are random, so its scores mean nothing; what the tests need is a real transformers model
that loads like any reward model (`AutoModelForSequenceClassification`, one label, a pad token, a chat
template) and scores deterministically.

Needs torch, transformers and tokenizers (the `hf` extra); they are imported when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envhub.testing.tiny_model import QWEN_STYLE_TEMPLATE, SAMPLE_TEXT, _fast_tokenizer


def tiny_reward_model(
    directory: Path,
    *,
    texts: Sequence[str] = (SAMPLE_TEXT,),
    vocab_size: int = 384,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 2,
    seed: int = 0,
) -> Path:
    """Build and save a two-layer Qwen2 reward model (`num_labels=1`, random weights); return `directory`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    tokenizer = _fast_tokenizer(list(texts), vocab_size, QWEN_STYLE_TEMPLATE)
    config = Qwen2Config(  # type: ignore[call-arg]  # num_labels: a PretrainedConfig argument
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        num_labels=1,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(config)  # type: ignore[no-untyped-call]
    with torch.no_grad():  # a wider score head than the default init, so different texts score apart
        model.score.weight.normal_(0.0, 1.0)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.eval().save_pretrained(directory)  # type: ignore[no-untyped-call]
    return directory
