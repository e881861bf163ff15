"""One episode as one token sequence: prompt, then per turn the generated tokens (mask 1) and the
tool message that follows them (mask 0), through the tokenizer's chat template.

The sequence grows by appending, so a turn's generated tokens stay exactly the ones the engine
sampled (never re-tokenised) and the whole episode is one training sample. The tool message's
tokens are the text the chat template adds after the assistant's message: the template must
render a conversation as a prefix of any longer one (ChatML, Llama 3 and most chat templates
do). A tool result that would leave less than ``max_new_tokens`` of the context drops its
lowest-ranked candidates first (``cut`` counts them); when even an empty list does not fit, the
next turn's generation budget shrinks (to 0: an empty, invalid call). Nothing here raises.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parpo.env.observation import Observation
from parpo.policy.llm.profile import Profile
from parpo.policy.llm.prompt import assistant_message, system_message, tool_message, user_message

#: Used when a tokenizer ships no chat template (ChatML).
DEFAULT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class Conversation:
    """``ids`` [L] the episode so far; ``mask`` [L] True on generated tokens; ``logp`` [L] the
    engine's log-prob of each generated token (0 elsewhere); ``prompt_text``: the chat text the
    last prompt encodes, without the call prefix (what the template's next message is appended
    to); ``cut``: candidates left out of tool results to fit the context; ``texts``: the calls,
    one per turn (call prefix + decoded generated tokens); ``personal``: the user's personal table
    [n_items, 4] its tool results show (None: off)."""

    messages: list[dict[str, str]]
    ids: list[int]
    mask: list[bool]
    logp: list[float]
    prompt_text: str
    cut: int = 0
    texts: list[str] = field(default_factory=list)
    personal: np.ndarray | None = None

    def copy(self) -> Conversation:
        return Conversation(list(self.messages), list(self.ids), list(self.mask), list(self.logp),
                            self.prompt_text, self.cut, list(self.texts), self.personal)  # fmt: skip


class ChatFormat:
    """Renders and tokenises conversations for one tokenizer and context size."""

    def __init__(self, tokenizer: Any, max_context: int, max_new_tokens: int, top_candidates: int,
                 stop_ids: Sequence[int], call_prefix: str = "", personal: bool = False,
                 memory: bool = False) -> None:  # fmt: skip
        self.tok, self.max_context, self.max_new_tokens = tokenizer, max_context, max_new_tokens
        self.personal = personal  # the rules explain the personal scores of tool results
        self.memory = memory  # the rules explain the skills the first message may list
        self.top_candidates, self.stop_ids = top_candidates, frozenset(stop_ids)
        self.template = getattr(tokenizer, "chat_template", None) or DEFAULT_TEMPLATE
        # Forced at the start of every call (after the generation prompt), never sampled.
        self.prefix = call_prefix
        self.prefix_ids = self.encode(call_prefix) if call_prefix else []

    def text(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                            add_generation_prompt=generation_prompt)  # fmt: skip

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def start(self, obs: Observation, profile: Profile, personal: np.ndarray | None = None,
              skills: Sequence[str] = ()) -> Conversation:  # fmt: skip
        """The first prompt; ``personal``: the user's personal table its tool results will show;
        ``skills``: the texts of the skills retrieved for the task."""
        messages = [system_message(self.personal, self.memory), user_message(obs, profile, skills)]
        text = self.text(messages, True)
        ids = self.encode(text) + self.prefix_ids
        return Conversation(messages, ids, [False] * len(ids), [0.0] * len(ids), text, personal=personal)

    def budget(self, conv: Conversation) -> int:
        """New tokens the next turn may generate (0: no room left)."""
        return self.budget_at(len(conv.ids))

    def budget_at(self, start: int) -> int:
        """New tokens a turn whose prompt is ``start`` tokens long may generate."""
        return max(0, min(self.max_new_tokens, self.max_context - start))

    def extend(self, conv: Conversation, gen: Sequence[int], logp: Sequence[float]) -> Conversation:
        """``conv`` with one turn's generated tokens [G] and their engine log-probs [G] appended."""
        out = conv.copy()
        text = self.prefix + self.decode([t for t in gen if t not in self.stop_ids])
        out.ids += list(gen)
        out.mask += [True] * len(gen)
        out.logp += [float(x) for x in logp]
        out.messages.append(assistant_message(text))
        out.texts.append(text)
        return out

    def observe(self, conv: Conversation, obs: Observation) -> Conversation:
        """``conv`` (ending with a generated turn) with the tool message of ``obs``'s latest call
        appended, then the next generation prompt (and the call prefix); candidates cut to leave
        ``max_new_tokens``."""
        base = self.text(conv.messages, False)
        # The template's text after the assistant's content, less the stop token it generated.
        head = conv.prompt_text + conv.messages[-1]["content"]
        tail = base[len(head) :] if base.startswith(head) else ""
        last = conv.ids[-1] if conv.mask and conv.mask[-1] else None
        if last in self.stop_ids:
            stop = self.tok.decode([last], skip_special_tokens=False)
            tail = tail[len(stop) :] if tail.startswith(stop) else tail
        n = min(self.top_candidates, len(obs.candidates)) if obs.history[-1].valid else 0
        room = self.max_context - self.max_new_tokens - len(conv.ids)
        for shown in range(n, -1, -1):
            message = tool_message(obs, shown, conv.personal)
            full = self.text([*conv.messages, message], True)
            cut = len(base) if full.startswith(base) else len(os.path.commonprefix([base, full]))
            delta = self.encode(tail + full[cut:]) + self.prefix_ids
            if len(delta) <= room or shown == 0:
                break
        out = conv.copy()
        out.ids += delta
        out.mask += [False] * len(delta)
        out.logp += [0.0] * len(delta)
        out.messages.append(message)
        out.prompt_text = full
        out.cut += n - shown
        return out
