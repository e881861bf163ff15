"""The native policy's value head: one value per step, no gradient into the policy, saved and
loaded with it; policies saved without one (older artefacts) still load and act."""

from __future__ import annotations

import json

import torch

from parpo.env.schema import Search
from parpo.policy.config import NativePolicyConfig
from parpo.policy.native import NativePolicy
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks

CFG = dict(dim=16, heads=2, layers=1, max_k=3, max_candidates=6)


def _policy(value_head: bool) -> NativePolicy:
    torch.manual_seed(0)
    cfg = NativePolicyConfig(**CFG, value_head=value_head)
    return NativePolicy.create(cfg, HandUsers(), hand_catalogue(), search_k=6)


def _observations(hand_env):
    obs = hand_env.reset(hand_tasks())
    first = [Search(category=o.task.request.category, strategy="popularity", k=6) for o in obs]
    return hand_env.step(first)[0]


def test_the_value_head_leaves_the_policy_as_it_was(hand_env) -> None:
    with_head, without = _policy(True), _policy(False)
    assert without.net.value_head is None
    a, b = with_head.net.state_dict(), without.net.state_dict()
    # created last: the same seed gives the same policy weights
    assert set(a) - set(b) == {k for k in a if k.startswith("value_head.")} != set()
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    obs = _observations(hand_env)
    out = with_head.act(obs, generator=torch.Generator().manual_seed(1))
    logp, ent, mask, value = with_head.net.forward_value(out.inputs, out.tokens, with_head.temperature)
    assert value.shape == (len(obs),)
    torch.testing.assert_close(logp, out.logprobs)
    # the critic's gradient stops at the state: only the head's own weights get one
    with_head.net.zero_grad()
    value.sum().backward()
    for name, p in with_head.net.named_parameters():
        assert (p.grad is not None and p.grad.abs().sum() > 0) == name.startswith("value_head."), name


def test_the_value_head_is_saved_and_loaded_with_the_policy(tmp_path, hand_env) -> None:
    policy = _policy(True)
    policy.save(tmp_path / "p")
    again = NativePolicy.load(tmp_path / "p", HandUsers(), hand_catalogue())
    assert again.net.cfg.value_head
    x = policy.featurizer.encode(_observations(hand_env))
    with torch.no_grad():
        torch.testing.assert_close(
            again.net.logits(x)["value"], policy.net.logits(x)["value"], rtol=0, atol=0
        )


def test_a_policy_saved_before_value_heads_loads_and_acts(tmp_path, hand_env) -> None:
    _policy(False).save(tmp_path / "p")
    meta_path = tmp_path / "p" / "policy.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["value_head"]  # what code before the option wrote
    meta_path.write_text(json.dumps(meta))
    again = NativePolicy.load(tmp_path / "p", HandUsers(), hand_catalogue())
    assert again.net.value_head is None
    assert len(again.act(_observations(hand_env), greedy=True).actions) == 3
