"""The native policy backend: a small transformer over [state, past calls, candidates].

Tokens of the encoder: one *state* token (user vector, request, step), one per past call
(its kind and position) and one per candidate (catalogue features, the policy's own item
embedding, rank in the list). Heads on the state token choose the tool and a search's
arguments; a pointer head scores candidates, and a recommend's slate is a Plackett-Luce draw
without replacement from those scores (Gumbel top-k when sampling, top-k when greedy):

    log p(slate) = sum_j [ s(c_j) / tau - logsumexp_{c not in c_<j} s(c) / tau ]

Personalisation comes from three places: the reward model's scores of each candidate for the
user (``PERSONAL_FEATURES``, unless ``personal_features`` is off), the reward model's user
vector on the state token, and a learned user x item pointer term ``<W user, e_item>`` over
the policy's own item embeddings. With ``memory_skills`` the skills retrieved from the skill
graph memory (``parpo.memory``) are more tokens, after the candidates. Everything runs on whatever device the parameters are on;
CPU is the default and trains in minutes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from parpo.env.catalogue import FEATURES, Catalogue
from parpo.env.environment import BatchEnv
from parpo.env.observation import Observation
from parpo.env.reward_model import RewardModel
from parpo.env.schema import STRATEGIES
from parpo.env.tasks import Task
from parpo.memory.policy_memory import MEMORY, SKILL_FEATURES, load_policy_memory, save_policy_memory
from parpo.policy.base import ActOutput
from parpo.policy.config import NativePolicyConfig
from parpo.policy.features import HISTORY, N_REQUEST, PERSONAL_FEATURES, Featurizer
from parpo.policy.plan_tree import gumbel_noise, sample_tree
from parpo.policy.slates import SlateDraws
from parpo.policy.tokens import (
    CONSTRAIN,
    HEAD,
    N_TOOLS,
    RECOMMEND,
    SCOPE,
    SEARCH,
    SIGNATURES,
    STRATEGY,
    TOOL,
    decode,
)

MAX_STEP_EMBED = 64
WEIGHTS, META = "policy.safetensors", "policy.json"


def _masked_log_softmax(logits: Tensor, allowed: Tensor) -> Tensor:
    return torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)


def _pick(logp: Tensor, index: Tensor) -> Tensor:
    return logp.gather(-1, index.unsqueeze(-1)).squeeze(-1)


def _entropy(logp: Tensor) -> Tensor:
    p = logp.exp()
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)


class NativeNet(nn.Module):
    """``forward(inputs, tokens) -> logp [B, T], entropy [B, T], mask [B, T]`` (see ``tokens``)."""

    def __init__(self, cfg: NativePolicyConfig, user_dim: int, n_items: int) -> None:
        super().__init__()
        if cfg.dim % cfg.heads:
            raise ValueError(f"policy.dim ({cfg.dim}) must be divisible by policy.heads ({cfg.heads})")
        d = cfg.dim
        self.cfg, self.user_dim, self.n_items = cfg, user_dim, n_items
        self.user = nn.Linear(user_dim, d)
        self.request = nn.Linear(N_REQUEST, d)
        self.step = nn.Embedding(MAX_STEP_EMBED, d)
        self.call = nn.Embedding(len(SIGNATURES) + 1, d, padding_idx=0)
        self.call_pos = nn.Embedding(HISTORY, d)
        self.cand = nn.Linear(len(FEATURES) + (len(PERSONAL_FEATURES) if cfg.personal_features else 0), d)
        self.item = nn.Embedding(n_items, d) if cfg.item_embeddings else None
        if self.item is not None:
            nn.init.normal_(self.item.weight, std=0.02)
        self.rank = nn.Embedding(cfg.max_candidates, d)
        self.kind = nn.Embedding(3, d)  # state, call, candidate
        # skill tokens (their bias marks their kind: ``kind`` keeps the shape older policies saved)
        self.skill = nn.Linear(len(SKILL_FEATURES), d) if cfg.memory_skills else None
        layer = nn.TransformerEncoderLayer(
            d, cfg.heads, cfg.ffn * d, cfg.dropout, batch_first=True, norm_first=True, activation="gelu"
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.tool_head = nn.Linear(d, N_TOOLS)
        self.strategy_head = nn.Linear(d, len(STRATEGIES))
        self.scope_head = nn.Linear(d, 2)
        self.constrain_head = nn.Linear(d, 2)
        self.query, self.key = nn.Linear(d, d), nn.Linear(d, d)
        # A direct user x item term: taste is an interaction the pointer should not have to
        # rediscover through attention alone.
        self.taste = nn.Linear(user_dim, d, bias=False) if cfg.item_embeddings else None
        # Created last, so the policy's own weights draw the same initial values with or without it.
        self.value_head = (
            nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1)) if cfg.value_head else None
        )

    def logits(self, x: dict[str, Tensor]) -> dict[str, Tensor]:
        """Head logits: tool [B, 3], strategy [B, S], scope [B, 2], constrain [B, 2], pointer [B, N];
        with ``cfg.value_head`` also ``value`` [B] (the critic's raw output for the step's state)."""
        # Compute over the batch's longest candidate list only (first steps have none).
        n = int(x["cand_mask"].sum(1).max()) if x["cand_mask"].numel() else 0
        x = {
            **x,
            "cand_rows": x["cand_rows"][:, :n],
            "cand_feats": x["cand_feats"][:, :n],
            "cand_mask": x["cand_mask"][:, :n],
        }
        b = x["cand_rows"].shape[0]
        dev = self.kind.weight.device
        state = (
            self.user(x["user"])
            + self.request(x["request"])
            + self.step(x["step"].clamp(max=MAX_STEP_EMBED - 1))
        )
        calls = self.call(x["history"]) + self.call_pos.weight
        cand = self.cand(x["cand_feats"]) + self.rank.weight[:n]
        if self.item is not None:
            cand = cand + self.item(x["cand_rows"])
        kinds = self.kind.weight
        parts = [(state + kinds[0]).unsqueeze(1), calls + kinds[1], cand + kinds[2]]
        pads = [torch.zeros(b, 1, dtype=torch.bool, device=dev), x["history"] == 0, ~x["cand_mask"]]
        if self.skill is not None:
            parts.append(self.skill(x["skills"]))
            pads.append(~x["skill_mask"])
        h = self.norm(self.encoder(torch.cat(parts, dim=1), src_key_padding_mask=torch.cat(pads, dim=1)))
        s, c = h[:, 0], h[:, 1 + HISTORY : 1 + HISTORY + n]
        pointer = (self.query(s).unsqueeze(1) * self.key(c)).sum(-1) / math.sqrt(s.shape[-1])
        if self.item is not None and self.taste is not None:
            pointer = pointer + (self.taste(x["user"]).unsqueeze(1) * self.item(x["cand_rows"])).sum(-1)
        out = {
            "tool": self.tool_head(s),
            "strategy": self.strategy_head(s),
            "scope": self.scope_head(s),
            "constrain": self.constrain_head(s),
            "pointer": pointer,
        }
        if self.value_head is not None:
            # Stop-gradient: the critic reads the policy's state but never moves the policy, so a
            # critic update leaves the actor's distribution exactly as it was (actor_then_critic).
            out["value"] = self.value_head(s.detach()).squeeze(-1)
        return out

    def forward(
        self, x: dict[str, Tensor], tokens: Tensor, temperature: float = 1.0
    ) -> tuple[Tensor, Tensor, Tensor]:
        return token_logprobs(self.logits(x), x, tokens, temperature)

    def forward_value(
        self, x: dict[str, Tensor], tokens: Tensor, temperature: float = 1.0
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``forward`` plus the value head's output [B] (an error without a value head)."""
        logits = self.logits(x)
        if "value" not in logits:
            raise ValueError("this policy has no value head (policy.value_head is false)")
        return (*token_logprobs(logits, x, tokens, temperature), logits["value"])


def token_mask(x: dict[str, Tensor], tokens: Tensor) -> Tensor:
    """[B, T] bool: the slots the policy chose (see ``parpo.policy.tokens``)."""
    b, t = tokens.shape
    tool = tokens[:, TOOL]
    search = tool == SEARCH
    mask = torch.zeros(b, t, dtype=torch.bool, device=tokens.device)
    mask[:, TOOL] = True
    mask[:, STRATEGY] = search
    mask[:, SCOPE] = search & x["scope_free"]
    mask[:, CONSTRAIN] = search & x["constrain_free"]
    slots = torch.arange(t - HEAD, device=tokens.device)
    mask[:, HEAD:] = (tool == RECOMMEND).unsqueeze(1) & (slots < x["n_pick"].unsqueeze(1))
    return mask


def token_logprobs(
    logits: dict[str, Tensor], x: dict[str, Tensor], tokens: Tensor, temperature: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-slot log-probabilities [B, T], entropies [B, T] (0 where masked) and the mask [B, T]."""
    tau = temperature
    mask = token_mask(x, tokens)
    logp = torch.zeros(tokens.shape, dtype=logits["tool"].dtype, device=tokens.device)
    ent = torch.zeros_like(logp)
    all2 = torch.ones(tokens.shape[0], 2, dtype=torch.bool, device=tokens.device)
    heads = (
        (TOOL, "tool", x["tool_mask"]),
        (STRATEGY, "strategy", torch.ones_like(logits["strategy"], dtype=torch.bool)),
        (SCOPE, "scope", all2),
        (CONSTRAIN, "constrain", all2),
    )
    for slot, name, allowed in heads:
        lp = _masked_log_softmax(logits[name] / tau, allowed)
        logp[:, slot] = _pick(lp, tokens[:, slot])
        ent[:, slot] = _entropy(lp)
    # Pointers: slot j excludes the candidates chosen at slots < j (Plackett-Luce).
    k = tokens.shape[1] - HEAD
    n = logits["pointer"].shape[1]
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if n == 0:  # no candidates anywhere in the batch: no pointer is a policy token
        return torch.where(mask, logp, zero), torch.where(mask, ent, zero), mask
    ptr_mask = mask[:, HEAD:]
    chosen = torch.nn.functional.one_hot(tokens[:, HEAD:].clamp(0, n - 1), n).bool() & ptr_mask.unsqueeze(-1)
    before = (chosen.cumsum(1) - chosen.long()) > 0  # [B, K, N] chosen at an earlier slot
    allowed = x["cand_mask"][:, :n].unsqueeze(1) & ~before
    allowed = allowed | ~allowed.any(-1, keepdim=True)  # rows with nothing left are masked anyway
    lp = _masked_log_softmax((logits["pointer"] / tau).unsqueeze(1).expand(-1, k, -1), allowed)
    logp[:, HEAD:] = _pick(lp, tokens[:, HEAD:].clamp(0, n - 1))
    ent[:, HEAD:] = _entropy(lp)
    return torch.where(mask, logp, zero), torch.where(mask, ent, zero), mask


def _sample(logits: Tensor, allowed: Tensor, tau: float, greedy: bool, gen: torch.Generator | None) -> Tensor:
    z = (logits / tau).masked_fill(~allowed, float("-inf"))
    if greedy:
        return z.argmax(-1)
    return torch.multinomial(torch.softmax(z, -1), 1, generator=gen).squeeze(-1)


class NativePolicy:
    """The native backend behind the ``Policy`` interface (``parpo.policy.base``)."""

    kind = "native"

    def __init__(self, net: NativeNet, featurizer: Featurizer, search_k: int) -> None:
        self.net, self.featurizer, self.search_k = net, featurizer, search_k
        self.temperature = net.cfg.temperature

    @classmethod
    def create(
        cls, cfg: NativePolicyConfig, reward_model: RewardModel, catalogue: Catalogue, search_k: int
    ) -> NativePolicy:
        feat = Featurizer(
            reward_model, catalogue, cfg.max_candidates, cfg.max_k, cfg.personal_features, cfg.memory_skills
        )
        return cls(NativeNet(cfg, feat.user_dim, len(catalogue)), feat, search_k)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @torch.no_grad()
    def act(
        self, observations: Sequence[Observation], *, greedy: bool = False, generator: Any = None
    ) -> ActOutput:
        dev = self.device
        x = {k: v.to(dev) for k, v in self.featurizer.encode(observations).items()}
        logits = self.net.logits(x)
        b, tau, k = len(observations), self.temperature, self.net.cfg.max_k
        tokens = torch.zeros(b, HEAD + k, dtype=torch.int64, device=dev)
        all2 = torch.ones(b, 2, dtype=torch.bool, device=dev)
        tokens[:, TOOL] = _sample(logits["tool"], x["tool_mask"], tau, greedy, generator)
        tokens[:, STRATEGY] = _sample(
            logits["strategy"], torch.ones_like(logits["strategy"], dtype=torch.bool), tau, greedy, generator
        )
        tokens[:, SCOPE] = torch.where(
            x["scope_free"], _sample(logits["scope"], all2, tau, greedy, generator), 0
        )
        tokens[:, CONSTRAIN] = torch.where(
            x["constrain_free"], _sample(logits["constrain"], all2, tau, greedy, generator), 0
        )
        n = logits["pointer"].shape[1]
        z = (logits["pointer"] / tau).masked_fill(~x["cand_mask"][:, :n], float("-inf"))
        if not greedy:
            z = z + gumbel_noise(z.shape, generator, dev)
        kk = min(k, n)
        tokens[:, HEAD : HEAD + kk] = z.topk(kk, dim=-1).indices
        # Non-policy slots hold 0 so that the recorded tokens are canonical.
        tokens = torch.where(token_mask(x, tokens), tokens, 0)
        logp, _, mask = token_logprobs(logits, x, tokens, tau)
        n_pick = x["n_pick"].tolist()
        host = tokens.cpu().numpy()
        actions = [decode(o, host[i], n_pick[i], self.search_k) for i, o in enumerate(observations)]
        return ActOutput(actions, x, tokens, logp, mask)

    def sample_slates(
        self, env: BatchEnv, tasks: Sequence[Task], n: int, *, generator: Any = None
    ) -> list[SlateDraws]:
        """``Policy.sample_slates`` as one plan tree: each distinct plan's steps run once, the
        slates of a plan drawn together (``parpo.policy.plan_tree``; same distribution)."""
        return sample_tree(self, env, tasks, n, generator)

    def logprobs(self, inputs: dict[str, Tensor], tokens: Tensor) -> tuple[Tensor, Tensor]:
        logp, ent, _ = self.net(inputs, tokens, self.temperature)
        return logp, ent

    def shown_skills(self, tasks: Sequence[Task]) -> list[list[dict[str, Any]]] | None:
        """``Policy.shown_skills``: the skills each task's observation holds as tokens."""
        f = self.featurizer
        if f.memory is None or not f.memory_skills:
            return None
        return [f.memory.named(hits) for hits in f.memory.shown(tasks, f.memory_skills)]

    # -- persistence -----------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """``policy.safetensors`` + ``policy.json`` (config and shapes) into ``directory``."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in _unwrap(self.net).state_dict().items()}
        save_file(state, str(d / WEIGHTS))
        meta = {
            "backend": self.kind,
            "config": self.net.cfg.model_dump(mode="json"),
            "user_dim": self.net.user_dim,
            "n_items": self.net.n_items,
            "features": list(self.featurizer.features),
            "search_k": self.search_k,
        }
        (d / META).write_text(json.dumps(meta, indent=2) + "\n")
        if self.featurizer.memory is not None:
            save_policy_memory(self.featurizer.memory, d / MEMORY)

    @classmethod
    def load(cls, directory: str | Path, reward_model: RewardModel, catalogue: Catalogue) -> NativePolicy:
        from safetensors.torch import load_file

        d = Path(directory)
        meta = json.loads((d / META).read_text())
        # Policies saved before ``personal_features`` existed were trained without them.
        cfg = NativePolicyConfig.model_validate({"personal_features": False, **meta["config"]})
        expected = [*FEATURES, *(PERSONAL_FEATURES if cfg.personal_features else ())]
        if meta.get("features") != expected:
            raise ValueError(f"{d}: policy was trained with candidate features {meta.get('features')}")
        policy = cls.create(cfg, reward_model, catalogue, int(meta["search_k"]))
        if policy.net.user_dim != meta["user_dim"] or policy.net.n_items != meta["n_items"]:
            raise ValueError(
                f"{d}: policy expects {meta['n_items']} items and user vectors of size {meta['user_dim']}, "
                f"got {policy.net.n_items} and {policy.net.user_dim}"
            )
        policy.net.load_state_dict(load_file(str(d / WEIGHTS)))
        if cfg.memory_skills and (d / MEMORY).is_dir():
            policy.featurizer.memory = load_policy_memory(d / MEMORY, reward_model.user_index)
        return policy


def _unwrap(module: nn.Module) -> nn.Module:
    # Fabric wraps modules (``_FabricModule``); its ``.module`` is the plain one.
    return getattr(module, "module", module)
