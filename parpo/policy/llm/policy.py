"""``LLMPolicy``: a causal LM behind the ``Policy`` interface (``parpo.policy.base``).

Each turn the model writes one JSON tool call (``parse.parse_call`` -> a typed action, or the
text for the env's invalid-call path). An episode is one growing token sequence
(``conversation``): ``act`` continues each observation's episode from the sequence its previous
turn produced (looked up by the episode's calls so far), so the generated tokens an episode was
sampled with are the ones it is trained on, whoever drives the episode loop (the trainer,
``episode_slates`` for serving's Monte-Carlo propensities, evaluation). An observation whose
earlier turns this policy did not produce (a restarted process) is rendered from its calls.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.env.catalogue import Catalogue
from parpo.env.environment import BatchEnv
from parpo.env.observation import Call, Observation
from parpo.env.personal import PersonalTables
from parpo.env.reward_model import RewardModel
from parpo.env.schema import Recommend, action_to_json
from parpo.env.tasks import Task
from parpo.memory.policy_memory import MEMORY, PolicyMemory, load_policy_memory, save_policy_memory
from parpo.policy.base import ActOutput
from parpo.policy.llm import model as lm
from parpo.policy.llm import value, vllm_engine  # noqa: F401  (vllm_engine registers ENGINES["vllm"])
from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.constrain import ToolCallConstraint, token_texts
from parpo.policy.llm.conversation import ChatFormat, Conversation
from parpo.policy.llm.engine import ENGINES
from parpo.policy.llm.logprobs import pad_batch, token_logprobs
from parpo.policy.llm.parse import parse_call
from parpo.policy.llm.profile import Profiler
from parpo.policy.llm.prompt import TOOL_ROLE, assistant_message
from parpo.policy.slates import SlateDraws, episode_slates

#: Episodes kept between two ``act`` calls (oldest dropped first; a dropped one is re-rendered).
PENDING_LIMIT = 4096


def _call_key(c: Call) -> tuple[str | None, bool, str | None]:
    return (None if c.action is None else repr(c.action), c.valid, c.error)


def episode_key(obs: Observation, upto: int) -> tuple[Any, ...]:
    """An episode's identity after its first ``upto`` calls: task, user and those calls."""
    return (obs.task.task_id, obs.task.user_id, tuple(_call_key(c) for c in obs.history[:upto]))


def _call_text(c: Call) -> str:
    return json.dumps(action_to_json(c.action)) if c.action is not None else ""


def stop_ids(tokenizer: Any, model: Any) -> list[int]:
    """Token ids that end a turn: the tokenizer's eos and the model's generation eos ids."""
    ids = {tokenizer.eos_token_id}
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, list) else {eos}
    return sorted(i for i in ids if i is not None)


class LLMPolicy:
    kind = "llm"

    def __init__(self, model: Any, tokenizer: Any, cfg: LLMPolicyConfig, reward_model: RewardModel,
                 catalogue: Catalogue, base: dict[str, str] | None = None, value_head: Any = None) -> None:  # fmt: skip
        self.model, self.tokenizer, self.cfg, self.base = model, tokenizer, cfg, base
        #: the critic (``parpo.policy.llm.value``), with ``cfg.value_head``; None without
        self.value_head = value_head
        self.temperature = cfg.temperature
        stop = stop_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
        self.chat = ChatFormat(tokenizer, cfg.max_context, cfg.max_new_tokens, cfg.top_candidates, stop,
                               cfg.call_prefix, cfg.personal_features, cfg.memory_skills > 0)  # fmt: skip
        # the trainer replays these masks; vllm decodes to the schema with its own (vllm_engine)
        self.constraint = (
            ToolCallConstraint(token_texts(tokenizer, model.config.vocab_size), stop, cfg.call_prefix)
            if cfg.constrained_decoding and cfg.engine == "hf"
            else None
        )
        self.engine = ENGINES[cfg.engine](model, self.pad_id, stop, constraint=self.constraint, cfg=cfg)
        self.profiler = Profiler(reward_model, catalogue, cfg.profile_items, cfg.profile_categories,
                                 cfg.profile_attributes)  # fmt: skip
        self.personal = PersonalTables(reward_model, catalogue) if cfg.personal_features else None
        self._pending: OrderedDict[tuple[Any, ...], list[tuple[Any, Conversation]]] = OrderedDict()
        #: the skill memory retrieved from (set by the trainer or at load); None: no skills shown
        self.memory: PolicyMemory | None = None

    @classmethod
    def create(cls, cfg: LLMPolicyConfig, reward_model: RewardModel, catalogue: Catalogue) -> LLMPolicy:
        """From ``cfg.model`` (a local folder); with ``cfg.lora.r`` > 0, fresh adapters on it and
        the base's path and sha256 recorded for publishing."""
        model, tok = lm.load_pretrained(cfg.model, cfg.dtype)
        base = None
        if cfg.lora.r > 0:
            model = lm.add_lora(model, cfg.lora)
            base = {"path": str(Path(cfg.model).resolve()), "sha256": lm.weights_sha256(cfg.model)}
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        # Created after the model (and its adapters): a seed draws the same policy with or without it.
        head = value.value_head(model.config.hidden_size) if cfg.value_head else None
        return cls(model, tok, cfg, reward_model, catalogue, base, head)

    def replica(self) -> LLMPolicy:
        """This policy acting with its own copy of the weights (eval mode) through its own engine:
        a rollout thread's (``RolloutQueue``), loaded with each version of the weights it needs
        while the trainer updates this one. No value head (the trainer scores values) and no
        memory (``single_rollout`` takes none); the prompt machinery is shared, read-only."""
        twin = copy.copy(self)
        # requires_grad flags kept: CPU linear kernels differ with them (log-probs by ~5e-7 even
        # under no_grad), and the copy must act exactly as the trainer's weights would
        twin.model = copy.deepcopy(self.model).eval()
        twin.value_head, twin.memory, twin._pending = None, None, OrderedDict()
        twin.engine = ENGINES[self.cfg.engine](twin.model, self.pad_id, sorted(self.chat.stop_ids),
                                               constraint=self.constraint, cfg=self.cfg)  # fmt: skip
        return twin

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- turns ---------------------------------------------------------------------------
    def start(self, observations: Sequence[Observation]) -> list[Conversation]:
        profiles = self.profiler.profiles([o.task for o in observations])
        tables = (
            self.personal.lookup([(o.task.user_id, o.task.profile) for o in observations])
            if self.personal is not None
            else [None] * len(observations)
        )
        skills = self.skill_texts([o.task for o in observations])
        return [
            self.chat.start(o, p, t, k)
            for o, p, t, k in zip(observations, profiles, tables, skills, strict=True)
        ]

    def skill_texts(self, tasks: Sequence[Task]) -> list[list[str]]:
        """The texts of the first ``memory_skills`` skills retrieved for each task (none without a
        memory). Retrieval is the memory's (hashed scenario recall, as the native policy's)."""
        m = self.cfg.memory_skills
        if self.memory is None or not m:
            return [[] for _ in tasks]
        graph = self.memory.graph
        return [[graph.text(h.slot) for h in hits] for hits in self.memory.shown(tasks, m)]

    def shown_skills(self, tasks: Sequence[Task]) -> list[list[dict[str, Any]]] | None:
        """``Policy.shown_skills``: the skills whose texts each task's first message lists (the
        same retrieval, cached, as ``skill_texts``)."""
        m = self.cfg.memory_skills
        if self.memory is None or not m:
            return None
        return [self.memory.named(hits) for hits in self.memory.shown(tasks, m)]

    def turn(self, convs: Sequence[Conversation], *, greedy: bool = False,
             generator: torch.Generator | None = None) -> list[Conversation]:  # fmt: skip
        """Each conversation with one generated turn appended (one batched engine call)."""
        gens = self.engine.generate([c.ids for c in convs], [self.chat.budget(c) for c in convs],
                                    temperature=self.temperature, greedy=greedy, generator=generator)  # fmt: skip
        return [self.chat.extend(c, g.tokens, g.logp) for c, g in zip(convs, gens, strict=True)]

    @staticmethod
    def action(conv: Conversation, obs: Observation) -> Any:
        """The env action of ``conv``'s latest turn (short ids resolved against ``obs``)."""
        return parse_call(conv.texts[-1], obs.candidate_ids)

    def _rendered(self, obs: Observation) -> Conversation:
        """An episode rebuilt from its calls: each call as its canonical JSON, earlier results as
        their status only, the latest with its candidates; no token counts as generated."""
        conv = self.start([obs])[0]
        *past, last = obs.history
        for c in past:
            status = {"ok": c.valid, **({"error": c.error} if c.error else {})}
            conv.messages += [
                assistant_message(_call_text(c)),
                {"role": TOOL_ROLE, "content": json.dumps(status)},
            ]
        conv.prompt_text = self.chat.text(conv.messages, True)
        conv.messages.append(assistant_message(_call_text(last)))
        conv.ids = self.chat.encode(conv.prompt_text + _call_text(last))
        conv.mask, conv.logp = [False] * len(conv.ids), [0.0] * len(conv.ids)
        return self.chat.observe(conv, obs)

    def _continue(self, obs: Observation) -> Conversation:
        entries = self._pending.get(episode_key(obs, obs.step - 1), [])
        last = obs.history[-1]
        for j, (action, conv) in enumerate(entries):
            if action == last.action if last.action is not None else isinstance(action, str):
                entries.pop(j)
                return self.chat.observe(conv, obs)
        return self._rendered(obs)

    def conversations(self, observations: Sequence[Observation]) -> list[Conversation]:
        """Each observation's episode up to its next generation prompt."""
        fresh = [i for i, o in enumerate(observations) if o.step == 0]
        out: list[Conversation | None] = [None] * len(observations)
        for i, c in zip(fresh, self.start([observations[i] for i in fresh]), strict=True):
            out[i] = c
        for i, o in enumerate(observations):
            if out[i] is None:
                out[i] = self._continue(o)
        return [c for c in out if c is not None]

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], *, greedy: bool = False,
            generator: Any = None) -> ActOutput:  # fmt: skip
        """One turn of each observation's episode. ``inputs``: the episodes through this turn
        (``pad_batch``) and ``start`` [B], where this turn's tokens begin; ``tokens``,
        ``logprobs``, ``mask`` [B, G]: the generated tokens."""
        prior = self.conversations(observations)
        convs = self.turn(prior, greedy=greedy, generator=generator)
        actions = [self.action(c, o) for c, o in zip(convs, observations, strict=True)]
        for o, a, c in zip(observations, actions, convs, strict=True):
            if not isinstance(a, Recommend) and o.step + 1 < o.max_steps:  # the episode goes on
                self._pending.setdefault(episode_key(o, o.step), []).append((a, c))
                self._pending.move_to_end(episode_key(o, o.step))
        while len(self._pending) > PENDING_LIMIT:
            self._pending.popitem(last=False)
        inputs = pad_batch(convs, self.pad_id)
        starts = torch.tensor([len(p.ids) for p in prior], dtype=torch.int64)
        inputs["start"] = starts
        g = max([len(c.ids) - len(p.ids) for c, p in zip(convs, prior, strict=True)] + [1])
        cols = (starts.unsqueeze(1) + torch.arange(g)).clamp(max=inputs["ids"].shape[1] - 1)
        mask = inputs["mask"].gather(1, cols) & (
            torch.arange(g) < (inputs["attention"].sum(1) - starts).unsqueeze(1)
        )
        tokens = torch.where(mask, inputs["ids"].gather(1, cols), 0)
        logp = torch.where(mask, inputs["rollout_logp"].gather(1, cols), 0.0)
        return ActOutput(actions, inputs, tokens, logp, mask)

    def allowed_masks(self, ids: Tensor, generated: Tensor, sel: Tensor) -> Tensor | None:
        """[N, V] bool: the constraint's mask at each position (b, j >= 1) where ``sel`` [B, L] is
        set, row-major (``token_logprobs``' order), replayed per turn from the generated runs of
        ``generated`` [B, L] and each turn's budget; None without constrained decoding."""
        if self.constraint is None:
            return None
        gen, want = generated.cpu().tolist(), sel.cpu().tolist()
        rows = []
        for b, toks in enumerate(ids.cpu().tolist()):
            j = 1
            while j < len(toks):
                if not gen[b][j]:
                    j += 1
                    continue
                end = j
                while end < len(toks) and gen[b][end]:
                    end += 1
                picked = [k for k in range(j, end) if want[b][k]]
                if picked:
                    masks = self.constraint.turn_masks(toks[j : picked[-1] + 1], self.chat.budget_at(j))
                    rows.append(masks[[k - j for k in picked]])
                j = end
        size = self.constraint.size
        return torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, size), dtype=bool))

    def logprobs(self, inputs: dict[str, Tensor], tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Log-probs and entropies [B, G] of ``act``'s generated tokens under the current weights."""
        dev = self.device
        ids, attn = inputs["ids"].to(dev), inputs["attention"].to(dev)
        g = tokens.shape[1]
        cols = (inputs["start"].to(dev).unsqueeze(1) + torch.arange(g, device=dev)).clamp(
            max=ids.shape[1] - 1
        )
        sel = torch.zeros_like(ids, dtype=torch.bool).scatter(1, cols, True) & inputs["mask"].to(dev)
        allowed = self.allowed_masks(ids, inputs["mask"], sel)
        logp, ent = token_logprobs(self.model, ids, attn, sel, self.temperature, allowed)
        return logp.gather(1, cols), ent.gather(1, cols)

    def sample_slates(self, env: BatchEnv, tasks: Sequence[Task], n: int, *,
                      generator: Any = None) -> list[SlateDraws]:  # fmt: skip
        """``n`` whole sampled episodes per task, in one batch (``episode_slates``): serving's
        Monte-Carlo propensities count them."""
        return episode_slates(self, env, tasks, n, generator=generator)

    # -- persistence ---------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """The model folder (``model.save``) and, with a memory, ``memory/`` (``parpo.memory.store``)."""
        lm.save(directory, self.model, self.tokenizer, self.cfg, self.base)
        if self.memory is not None:
            save_policy_memory(self.memory, Path(directory) / MEMORY)
        if self.value_head is not None:
            value.save(directory, self.value_head)

    @classmethod
    def load(cls, directory: str | Path, reward_model: RewardModel, catalogue: Catalogue) -> LLMPolicy:
        """A saved policy; one saved without a value head (or before heads existed) loads without."""
        model, tok, cfg, base = lm.load(directory)
        model.eval()
        head = value.load(directory, model.config.hidden_size) if cfg.value_head else None
        policy = cls(model, tok, cfg, reward_model, catalogue, base, head)
        if cfg.memory_skills and (Path(directory) / MEMORY).is_dir():
            policy.memory = load_policy_memory(Path(directory) / MEMORY, reward_model.user_index)
        return policy
