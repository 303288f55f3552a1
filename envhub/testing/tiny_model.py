"""Tiny chat models built on the spot, for tests that need a real model but cannot download one.

`tiny_chat_model` trains a byte-level BPE tokenizer with `tokenizers`, wraps it with a Qwen-style chat
template (tools, `<tool_call>` blocks), builds a two-layer Qwen2 with random weights and, if given
conversations, trains it until greedy decoding replays their assistant turns token for token. That last
part lets a test play a real episode end to end with a model whose answers it knows.

Needs torch, transformers and tokenizers (the `hf` extra); they are imported when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.inference.chat_template import template_message
from envhub.messages import Message
from envhub.tools import ToolSpec

QWEN_STYLE_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments ' }}
{{- 'within <tool_call></tool_call> XML tags:\n<tool_call>\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + message.content }}
{%- for call in message.tool_calls or [] %}
{%- if message.content or not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n{"name": ' + (call.function.name | tojson) + ', "arguments": ' }}
{{- (call.function.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()
"""Renders like Qwen2.5: a turn's prompt plus its completion is exactly the start of the next prompt."""

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
"""Single tokens, as in Qwen's vocabulary, but not special: decoding keeps them, so calls can be parsed."""

SAMPLE_TEXT = """\
The quick brown fox jumps over the lazy dog. Start with 512; add 37 to it, then multiply it by 4.
What is the result? Use the calculator tools for every operation, then reply with the final number only.
{"name": "add", "arguments": {"a": 12, "b": 30}} 0123456789 + - * / = ( ) [ ] { } < > " ' , . : ;
"""

QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Qwen2's pre-tokenizer split, so that `AutoTokenizer`, which rebuilds a saved qwen2 tokenizer with it,
tokenizes exactly as the tokenizer built here."""

Conversation = tuple[list[Message], list[ToolSpec]]
"""The messages of one conversation and the tools offered in it."""


def _fast_tokenizer(texts: Sequence[str], vocab_size: int, chat_template: str) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(TAG_TOKENS)
    return tokenizer


def _render(tokenizer: Any, conversation: Conversation) -> str:
    messages, tools = conversation
    text: str = tokenizer.apply_chat_template(
        [template_message(m) for m in messages], tools=[t.to_openai() for t in tools] or None, tokenize=False
    )
    return text


def _ids(tokenizer: Any, messages: list[Message], tools: list[ToolSpec], *, cue: bool) -> list[int]:
    ids: list[int] = tokenizer.apply_chat_template(
        [template_message(m) for m in messages],
        tools=[t.to_openai() for t in tools] or None,
        add_generation_prompt=cue,
        tokenize=True,
        return_dict=False,
    )
    return ids


def _assistant_mask(tokenizer: Any, conversation: Conversation) -> tuple[list[int], list[bool]]:
    """The conversation's token ids, and which of them the assistant produced (its turns and their end)."""
    messages, tools = conversation
    ids = _ids(tokenizer, messages, tools, cue=False)
    mask = [False] * len(ids)
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for k, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt = _ids(tokenizer, messages[:k], tools, cue=True)
        if prompt != ids[: len(prompt)]:
            raise ValueError(
                f"the chat template's prompt for message {k} is not a prefix of the whole conversation's "
                "tokens, so no model could replay the conversation turn by turn"
            )
        start = len(prompt)
        end = ids.index(end_id, start)
        mask[start : end + 1] = [True] * (end + 1 - start)
    return ids, mask


def tiny_chat_model(
    directory: Path,
    *,
    conversations: Sequence[Conversation] = (),
    texts: Sequence[str] = (SAMPLE_TEXT,),
    chat_template: str = QWEN_STYLE_TEMPLATE,
    vocab_size: int = 512,
    hidden_size: int = 128,
    layers: int = 2,
    heads: int = 2,
    seed: int = 0,
    max_train_steps: int = 600,
) -> Path:
    """Build and save a tiny chat model in `directory`; return it.

    With `conversations`, the model is trained until greedy decoding reproduces every assistant turn of
    each (prompted by the turns before it), or a RuntimeError says it could not.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    bootstrap = _fast_tokenizer(list(texts), len(SPECIAL_TOKENS) + 256 + len(TAG_TOKENS), chat_template)
    rendered = [_render(bootstrap, c) for c in conversations]
    built = _fast_tokenizer([*texts, *rendered], vocab_size, chat_template)
    end_id = built.convert_tokens_to_ids("<|im_end|>")
    pad_id = built.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(built),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end_id,
        pad_token_id=pad_id,
    )
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    built.save_pretrained(directory)
    # Train on what a policy will load, not on the object built here: they may differ by class.
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    for text in [*texts, *rendered]:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"{type(tokenizer).__name__} reloaded from {directory} tokenizes differently")
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if conversations:
        _memorise(model, [_assistant_mask(tokenizer, c) for c in conversations], max_train_steps)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=end_id, pad_token_id=pad_id, do_sample=False
    )
    model.eval().save_pretrained(directory)  # type: ignore[no-untyped-call]
    return directory


def _memorise(model: Any, samples: list[tuple[list[int], list[bool]]], max_steps: int) -> None:
    """Train on the assistant tokens until each is the argmax after its prefix, by a clear margin."""
    import torch

    tensors = [(torch.tensor([ids]), torch.tensor(mask[1:])) for ids, mask in samples]
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(max_steps):
        optimiser.zero_grad()
        total = torch.zeros(())
        learnt = True
        for ids, mask in tensors:
            logits = model(ids).logits[0, :-1][mask]
            targets = ids[0, 1:][mask]
            total = total + torch.nn.functional.cross_entropy(logits, targets)
            probs = torch.softmax(logits.detach(), dim=-1)
            learnt = learnt and bool((probs.gather(-1, targets[:, None]) > 0.9).all())
        if learnt:
            return
        total.backward()  # type: ignore[no-untyped-call]
        optimiser.step()
    raise RuntimeError(f"the tiny model did not learn its conversations in {max_steps} steps")
