"""The LLM backend's per-token critic: the value-based estimators on the episode token layout
(a hand-computed 3-turn episode with tool-result tokens between the turns), the value head's
alignment, saving and loading, and a short run of each estimator with the tiny model."""

from __future__ import annotations

import json
import math
import shutil

import polars as pl
import pytest
import torch

from parpo.algorithms import VALUE_ESTIMATORS, ValueConfig
from parpo.policy.llm.conversation import Conversation
from parpo.policy.llm.credit import chain_mask, token_credit, turn_ids
from parpo.policy.llm.logprobs import pad_batch
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks

pytestmark = pytest.mark.llm

# Episode 0, L = 10: prompt tokens 0, 1; turn 0 = generated 2, 3; tool result 4; turn 1 = 5, 6;
# tool result 7; turn 2 = 8; then episode 1 (one turn, tokens 1, 2) pads it to the same width.
GEN = [False, False, True, True, False, True, True, False, True, False]
# Critic values of the state before each token: on the turns .5 .6 | .4 .7 | .8, on the tool tokens
# .3 and .9 (only gae's chain reads them); prompt and padding 9 (no estimator may read them).
V0 = [9.0, 9.0, 0.5, 0.6, 0.3, 0.4, 0.7, 0.9, 0.8, 9.0]
V1 = [9.0, 0.2, 0.5, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]


def _conv(mask: list[bool]) -> Conversation:
    n = len(mask)
    return Conversation([], list(range(10, 10 + n)), mask, [-0.1 if m else 0.0 for m in mask], "")


def _layout() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two episodes through ``pad_batch`` (the trainer's layout): mask [2, 10], values, reward."""
    batch = pad_batch([_conv(GEN), _conv([False, True, True])], pad_id=0)
    return (
        batch["mask"],
        torch.tensor([V0, V1], dtype=torch.float64),
        torch.tensor([1.0, 0.5], dtype=torch.float64),
    )


def _credit(estimator: str, **kw):
    mask, values, reward = _layout()
    cfg = ValueConfig(estimator=estimator, lam=0.5, **kw)
    ent = torch.ones_like(values)
    return token_credit(reward, values, mask, ent, cfg, whiten_adv=False)


def test_turns_and_chains_of_the_token_layout() -> None:
    mask, _, _ = _layout()
    assert turn_ids(mask)[0].tolist() == [-1, -1, 0, 0, -1, 1, 1, -1, 2, -1]
    assert turn_ids(mask)[1].tolist() == [-1, 0, 0] + [-1] * 7
    assert chain_mask("skip_obs_gae", mask).equal(mask)
    # gae's chain: the span from the first generated token to the last, tool tokens included
    assert chain_mask("gae", mask)[0].tolist() == [False, False] + [True] * 7 + [False]
    assert chain_mask("gae", mask)[1].tolist() == [False, True, True] + [False] * 7


def test_skip_obs_gae_on_the_layout_by_hand() -> None:
    # chain 2 -> 3 -> 5 -> 6 -> 8 (gamma 1, lambda .5), reward 1 on token 8:
    #   t8: d = 1 - .8 = .2                 A = .2
    #   t6: d = .8 - .7 = .1                A = .1 + .5 * .2 = .2
    #   t5: d = .7 - .4 = .3                A = .3 + .5 * .2 = .4
    #   t3: d = .4 - .6 = -.2               A = -.2 + .5 * .4 = 0
    #   t2: d = .6 - .5 = .1                A = .1 + .5 * 0 = .1
    # the tool tokens 4 and 7 get nothing; critic targets (lambda 1): the return 1 on every turn token
    credit, m = _credit("skip_obs_gae")
    assert credit.adv[0].tolist() == pytest.approx([0, 0, 0.1, 0, 0, 0.4, 0.2, 0, 0.2, 0])
    assert credit.target[0].tolist() == pytest.approx([0, 0, 1, 1, 0, 1, 1, 0, 1, 0])
    assert credit.value_mask[0].tolist() == GEN
    # episode 1 (one turn, reward .5): t2: .5 - .5 = 0; t1: .5 - .2 + .5 * 0 = .3
    assert credit.adv[1, :3].tolist() == pytest.approx([0, 0.3, 0])
    assert m["adv/mean"] == pytest.approx(1.2 / 7)


def test_gae_on_the_layout_runs_through_the_tool_tokens_by_hand() -> None:
    # chain 2..8, tool tokens as steps with reward 0 and their own values (.3 at 4, .9 at 7):
    #   t8: .2;  t7: d = .8 - .9 = -.1, A = -.1 + .5 * .2 = 0;  t6: d = .9 - .7 = .2, A = .2
    #   t5: d = .7 - .4 = .3, A = .4;  t4: d = .4 - .3 = .1, A = .1 + .5 * .4 = .3
    #   t3: d = .3 - .6 = -.3, A = -.3 + .5 * .3 = -.15;  t2: d = .6 - .5 = .1, A = .1 - .075 = .025
    # the actor gets the turn tokens' advantages only; the critic fits A + V on the whole chain
    credit, _ = _credit("gae")
    assert credit.adv[0].tolist() == pytest.approx([0, 0, 0.025, -0.15, 0, 0.4, 0.2, 0, 0.2, 0])
    assert credit.target[0].tolist() == pytest.approx([0, 0, 0.525, 0.45, 0.6, 0.8, 0.9, 0.9, 1.0, 0])
    assert credit.value_mask[0].tolist() == [False, False] + [True] * 7 + [False]


def test_turn_gae_on_the_layout_by_hand() -> None:
    # turns (2, 3), (5, 6), (8): R = 0, 0, 1; V at first tokens .5, .4, .8 (gamma 1, lambda .5)
    #   k2: d = 1 - .8 = .2           A = .2
    #   k1: d = .8 - .4 = .4          A = .4 + .5 * .2 = .5
    #   k0: d = .4 - .5 = -.1         A = -.1 + .5 * .5 = .15
    # each turn's tokens share its advantage (uniform weights: mean 1); targets A_k + V_k
    credit, m = _credit("turn_gae")
    assert credit.adv[0].tolist() == pytest.approx([0, 0, 0.15, 0.15, 0, 0.5, 0.5, 0, 0.2, 0])
    assert credit.target[0].tolist() == pytest.approx([0, 0, 0.65, 0, 0, 0.9, 0, 0, 1.0, 0])
    assert credit.value_mask[0].tolist() == [
        False,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
        True,
        False,
    ]
    assert m["turn/count_mean"] == 2.0  # (3 + 1) / 2


def test_pact_on_the_layout_is_return_minus_value() -> None:
    credit, _ = _credit("pact", critic_loss="bce")
    assert credit.adv[0].tolist() == pytest.approx([0, 0, 0.5, 0.4, 0, 0.6, 0.3, 0, 0.2, 0])
    assert credit.target[0].tolist() == pytest.approx([0, 0, 1, 1, 0, 1, 1, 0, 1, 0])


def test_the_layout_gives_the_pure_estimators_on_the_action_tokens_alone() -> None:
    # skip_obs_gae on the layout = skip_obs_gae on the turn tokens with everything else removed;
    # with one turn (no tool token inside), gae = skip_obs_gae (critic lambda = lambda)
    mask, values, reward = _layout()
    cfg = ValueConfig(estimator="skip_obs_gae", lam=0.5, gamma=0.9)
    on_layout, _ = token_credit(reward, values, mask, torch.ones_like(values), cfg, whiten_adv=False)
    compact_v = torch.tensor([[0.5, 0.6, 0.4, 0.7, 0.8]], dtype=torch.float64)
    compact_r = torch.tensor([[0, 0, 0, 0, 1.0]], dtype=torch.float64)
    pure, _ = VALUE_ESTIMATORS["skip_obs_gae"](
        compact_r, compact_v, torch.ones_like(compact_r, dtype=torch.bool), cfg
    )
    torch.testing.assert_close(on_layout.adv[0][mask[0]].double(), pure.adv[0].double())
    one = dict(lam=0.5, critic_lam=0.5, gamma=0.9)
    g, _ = token_credit(
        reward[1:], values[1:], mask[1:], values[1:], ValueConfig(estimator="gae", **one), whiten_adv=False
    )
    s, _ = token_credit(
        reward[1:],
        values[1:],
        mask[1:],
        values[1:],
        ValueConfig(estimator="skip_obs_gae", **one),
        whiten_adv=False,
    )
    torch.testing.assert_close(g.adv, s.adv)
    torch.testing.assert_close(g.target, s.target)


# ----------------------------------------------------------------------------- with the tiny model


def _policy(tiny_llm, **cfg):
    from parpo.policy.llm.config import LLMPolicyConfig
    from parpo.policy.llm.policy import LLMPolicy

    torch.manual_seed(0)
    c = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=8, top_candidates=4, **cfg)
    return LLMPolicy.create(c, HandUsers(), hand_catalogue())


def test_the_value_of_a_token_is_the_head_on_the_hidden_state_before_it(tiny_llm) -> None:
    from parpo.policy.llm.logprobs import token_logprobs, token_scores

    policy = _policy(tiny_llm, value_head=True)
    ids = torch.tensor([[5, 9, 14, 3, 7, 0], [8, 2, 6, 11, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 0, 1, 0, 0]], dtype=torch.bool)
    logp, ent, v = token_scores(policy.model, ids, attn, mask, 1.0, None, policy.value_head, mask)
    with torch.no_grad():
        hidden = policy.model(input_ids=ids, attention_mask=attn, output_hidden_states=True).hidden_states[-1]
        direct = policy.value_head(hidden).squeeze(-1)
    assert v[0, 2:5].tolist() == pytest.approx(direct[0, 1:4].tolist(), abs=1e-6)
    assert v[1, [1, 3]].tolist() == pytest.approx(direct[1, [0, 2]].tolist(), abs=1e-6)
    assert v[~mask].abs().sum() == 0
    # the log-probs are token_logprobs' own; the critic's gradient stops at the hidden state
    torch.testing.assert_close((logp, ent), token_logprobs(policy.model, ids, attn, mask, 1.0))
    v.sum().backward()
    assert all(p.grad is None for p in policy.model.parameters())
    assert all(p.grad is not None for p in policy.value_head.parameters())


def test_without_tis_the_critic_reads_its_values_alone_and_they_are_the_full_passes(
    tiny_llm, hand_env, monkeypatch
) -> None:
    """loss.tis off: the behaviour log-probs are the engine's, so the batch's values come from a
    forward without the vocabulary (``behaviour_values``); they equal the full scoring's values,
    and no entropies are computed unless turn_gae's entropy weights need them."""
    import parpo.policy.llm.trainer as trainer
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.rollout import collect

    def cfg(estimator: str, tis: bool, **value) -> LLMTrainConfig:
        return LLMTrainConfig.model_validate(
            {
                "policy": {"model": str(tiny_llm), "max_new_tokens": 12, "top_candidates": 4},
                "advantage": {"estimator": estimator},
                "value": value,
                "loss": {"tis": tis},
                "train": {"micro_batch_size": 4},
            }
        )

    policy = _policy(tiny_llm, value_head=True)
    eps = collect(policy, hand_env, hand_tasks(), 2, {"u1": 0, "u2": 1, "u9": 2},
                  generator=torch.Generator().manual_seed(3))  # fmt: skip
    calls: list[str] = []
    real_scores, real_values = trainer.behaviour_scores, trainer.behaviour_values
    monkeypatch.setattr(
        trainer, "behaviour_scores", lambda *a, **k: calls.append("scores") or real_scores(*a, **k)
    )
    monkeypatch.setattr(
        trainer, "behaviour_values", lambda *a, **k: calls.append("values") or real_values(*a, **k)
    )
    alone = trainer.training_batch(policy, eps.convs, cfg("gae", tis=False))
    full = trainer.training_batch(policy, eps.convs, cfg("gae", tis=True))
    weighted = trainer.training_batch(policy, eps.convs, cfg("turn_gae", False, token_weights="entropy"))
    assert calls == ["values", "scores", "scores"]
    chain = chain_mask("gae", alone["mask"])
    assert alone["values"][chain].abs().sum() > 0
    torch.testing.assert_close(alone["values"], full["values"], rtol=0, atol=1e-6)
    assert "entropy" not in alone and "entropy" in weighted
    assert alone["old_logp"].equal(alone["rollout_logp"])


def test_the_value_head_is_saved_and_loaded_and_policies_without_one_still_load(tiny_llm, tmp_path) -> None:
    from parpo.policy.llm.policy import LLMPolicy

    base = tmp_path / "base"
    shutil.copytree(tiny_llm, base)
    for lora in (0, 4):
        policy = _policy(base, value_head=True, lora={"r": lora})
        with torch.no_grad():
            policy.value_head[-1].bias.fill_(0.25)
        policy.save(tmp_path / f"p{lora}")
        loaded = LLMPolicy.load(tmp_path / f"p{lora}", HandUsers(), hand_catalogue())
        for (n, a), b in zip(
            policy.value_head.state_dict().items(), loaded.value_head.state_dict().values(), strict=True
        ):
            assert torch.equal(a, b), n
    # saved without a head, and a folder written before heads existed (no key): no head
    _policy(base).save(tmp_path / "plain")
    meta = json.loads((tmp_path / "plain" / "llm.json").read_text())
    assert not (tmp_path / "plain" / "value_head.safetensors").exists()
    del meta["config"]["value_head"]
    (tmp_path / "plain" / "llm.json").write_text(json.dumps(meta))
    assert LLMPolicy.load(tmp_path / "plain", HandUsers(), hand_catalogue()).value_head is None


class HandSource:
    """The hand-made world as an ``EnvSource`` for the LLM trainer (no data, no reward model)."""

    def __init__(self) -> None:
        self.reward_model, self.catalogue = HandUsers(), hand_catalogue()
        self.reward_model.user_index = {"u1": 0, "u2": 1, "u9": 2}

    def env(self, transform=None):
        from parpo.env import BatchEnv, EnvConfig

        return BatchEnv(self.catalogue, self.reward_model, EnvConfig(k=3, max_steps=2, search_k=6))

    def tasks(self, part: str):
        return hand_tasks()


@pytest.mark.parametrize(
    ("preset", "extra", "logged"),
    [
        (
            "llm-tiny",
            ["advantage.estimator=gae"],
            ("critic/loss", "critic/explained_variance", "returns/mean"),
        ),
        ("llm-turn_gae", [], ("critic/loss", "turn/count_mean", "actor/pg/clipfrac")),
        ("llm-sao", ["train.group_size=1"], ("critic/loss", "gae/lambda_mean", "actor/pg/clipfrac")),
        ("llm-pact", [], ("critic/loss", "critic/is_weight_mean", "critic/target_clamped_frac")),
        ("llm-tiny", ["shaping.invalid_coef=0.1"], ("reward/task/invalid_call/mean",)),
    ],
)
def test_each_estimator_trains_the_tiny_llm_without_nan_and_logs_its_components(
    tiny_llm, tmp_path, preset, extra, logged
) -> None:
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.trainer import LLMTrainer
    from parpo.presets import load

    small = [
        f"policy.model={tiny_llm}",
        "policy.max_new_tokens=8",
        "policy.top_candidates=4",
        "train.updates=1",
    ]
    small += [
        "train.tasks_per_update=2",
        "train.group_size=2",
        "train.micro_batch_size=4",
        "train.progress_bar=false",
    ]
    cfg = load(LLMTrainConfig, "policy", preset, [*small, *extra])
    res = LLMTrainer(cfg, HandSource(), tmp_path / "run").fit()
    log = pl.read_csv(res.logs)
    for k in logged:
        assert k in log.columns, k
    for k in log.columns:
        assert all(math.isfinite(v) for v in log[k].drop_nulls().to_list()), k
    assert (res.policy.value_head is not None) == cfg.value_based
    if cfg.value_based:
        assert {"value_reward/mean", "adv/mean", "critic/grad_norm"} <= set(log.columns)
        assert all(torch.isfinite(p).all() for p in res.policy.value_head.parameters())
    if cfg.shaping is not None:  # random text: invalid calls, each -0.1, clipped at -0.25
        assert -0.25 <= log["reward/task/invalid_call/mean"][0] < 0
