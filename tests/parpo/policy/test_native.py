"""The native policy: token masks, Plackett-Luce log-probabilities checked by hand, rescoring
equals sampling, decoding to schema actions, greedy top-k, save/load."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from parpo.env.schema import Filter, Recommend, Search
from parpo.policy.config import NativePolicyConfig
from parpo.policy.native import NativePolicy, token_logprobs
from parpo.policy.tokens import CONSTRAIN, HEAD, RECOMMEND, SCOPE, SEARCH, STRATEGY, TOOL
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks


def _after_search(hand_env, hand_policy, gen=None):
    obs = hand_env.reset(hand_tasks())
    first = [Search(category=o.task.request.category, strategy="popularity", k=6) for o in obs]
    obs, *_ = hand_env.step(first)
    return obs


def test_first_step_offers_only_search_and_masks_its_arguments(hand_env, hand_policy):
    obs = hand_env.reset(hand_tasks())
    out = hand_policy.act(obs, generator=torch.Generator().manual_seed(0))
    # Nothing searched yet: no candidates to recommend, nothing to filter.
    assert all(isinstance(a, Search) for a in out.actions)
    assert out.tokens[:, TOOL].tolist() == [SEARCH] * 3
    m = out.mask
    assert m[:, TOOL].all() and m[:, STRATEGY].all()
    # scope is a choice only when the request names a category; constrain only with constraints.
    assert m[:, SCOPE].tolist() == [True, True, False]
    assert m[:, CONSTRAIN].tolist() == [False, True, False]
    assert not m[:, HEAD:].any()
    # Masked slots carry token 0 and log-probability 0; chosen ones a negative log-probability.
    assert (out.tokens[~m] == 0).all() and (out.logprobs[~m] == 0).all()
    assert (out.logprobs[m] <= 0).all()


def test_pointer_logprobs_are_plackett_luce_by_hand(hand_env, hand_policy):
    obs = _after_search(hand_env, hand_policy)
    x = {k: v for k, v in hand_policy.featurizer.encode(obs).items()}
    with torch.no_grad():
        logits = hand_policy.net.logits(x)
    tokens = torch.zeros(3, HEAD + 3, dtype=torch.int64)
    tokens[0, TOOL] = RECOMMEND
    n0 = int(x["n_pick"][0])
    assert n0 == 3  # u1 searched category a: three candidates, slate of K = 3
    tokens[0, HEAD : HEAD + 3] = torch.tensor([2, 0, 1])
    tau = 0.7
    logp, ent, mask = token_logprobs(logits, x, tokens, tau)
    z = logits["pointer"][0, :3].double() / tau
    tool = torch.log_softmax(logits["tool"][0].double().masked_fill(~x["tool_mask"][0], -math.inf) / tau, -1)
    expected = [
        float(tool[RECOMMEND]),
        float(z[2] - torch.logsumexp(z, 0)),
        float(z[0] - torch.logsumexp(z[[0, 1]], 0)),
        0.0,  # the last remaining candidate is certain
    ]
    got = [float(logp[0, TOOL]), *logp[0, HEAD : HEAD + 3].tolist()]
    assert got == pytest.approx(expected, abs=1e-5)
    assert mask[0].tolist() == [True, False, False, False, True, True, True]
    assert float(ent[0, HEAD + 2]) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_rescoring_recorded_tokens_reproduces_sampling_logprobs(hand_env, hand_policy, temperature):
    hand_policy.temperature = temperature
    gen = torch.Generator().manual_seed(3)
    obs = hand_env.reset(hand_tasks())
    done = np.zeros(3, dtype=bool)
    recorded = []
    while not done.all():
        active = np.nonzero(~done)[0]
        out = hand_policy.act([obs[i] for i in active], generator=gen)
        recorded.append(out)
        full = [None] * 3
        for i, a in zip(active, out.actions, strict=True):
            full[i] = a
        obs, _, term, trunc, _ = hand_env.step(full)
        done |= term | trunc
    assert len(recorded) >= 2
    for out in recorded:
        logp, _ = hand_policy.logprobs(out.inputs, out.tokens)
        torch.testing.assert_close(logp, out.logprobs, rtol=0, atol=1e-6)
        # Row by row (other padding, other batch) gives the same numbers.
        for i in range(out.tokens.shape[0]):
            row = {k: v[i : i + 1] for k, v in out.inputs.items()}
            lp, _ = hand_policy.logprobs(row, out.tokens[i : i + 1])
            torch.testing.assert_close(lp[0], out.logprobs[i], rtol=0, atol=1e-5)


def test_recommend_decodes_to_distinct_candidates_and_greedy_takes_the_top_k(hand_env, hand_policy):
    obs = _after_search(hand_env, hand_policy)
    # Force a recommend by masking the other tools' logits out through a huge bias.
    with torch.no_grad():
        hand_policy.net.tool_head.bias.copy_(torch.tensor([-50.0, -50.0, 50.0]))
    out = hand_policy.act(obs, greedy=True)
    x = out.inputs
    with torch.no_grad():
        pointer = hand_policy.net.logits(x)["pointer"]
    for i, (o, a) in enumerate(zip(obs, out.actions, strict=True)):
        assert isinstance(a, Recommend)
        n = int(x["n_pick"][i])
        assert len(a.items) == n == min(o.k, len(o.candidates)) and len(set(a.items)) == n
        assert set(a.items) <= set(o.candidate_ids)
        scores = pointer[i, : len(o.candidates)].numpy()
        expected = [o.candidate_ids[j] for j in np.argsort(-scores, kind="stable")[:n]]
        assert a.items == expected
    _, rewards, term, _, _ = hand_env.step(out.actions)
    assert term.all() and (rewards["task/items_valid"] == 1.0).all()


def test_a_filter_is_offered_only_after_a_search_with_constraints(hand_env, hand_policy):
    obs = _after_search(hand_env, hand_policy)
    x = hand_policy.featurizer.encode(obs)
    # Only t2 has constraints: filter is allowed there alone.
    assert x["tool_mask"][:, 1].tolist() == [False, True, False]
    tokens = torch.zeros(3, HEAD + 3, dtype=torch.int64)
    tokens[1, TOOL] = 1
    from parpo.policy.tokens import decode

    a = decode(obs[1], tokens[1].numpy(), 0, 6)
    assert isinstance(a, Filter) and a.constraints.price_max == 6.0


def test_save_load_gives_identical_logits(tmp_path, hand_env, hand_policy):
    obs = _after_search(hand_env, hand_policy)
    hand_policy.save(tmp_path / "p")
    again = NativePolicy.load(tmp_path / "p", HandUsers(), hand_catalogue())
    x = hand_policy.featurizer.encode(obs)
    with torch.no_grad():
        a, b = hand_policy.net.logits(x), again.net.logits(x)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_load_refuses_another_catalogue(tmp_path, hand_policy):
    import polars as pl

    from parpo.env import Catalogue

    hand_policy.save(tmp_path / "p")
    bigger = hand_catalogue().frame.vstack(hand_catalogue().frame.with_columns(pl.col("item_id") + "x"))
    with pytest.raises(ValueError, match="expects 6 items"):
        NativePolicy.load(tmp_path / "p", HandUsers(), Catalogue(bigger))


def test_a_policy_saved_without_personal_features_loads_and_acts_without_them(tmp_path, hand_env):
    import json

    torch.manual_seed(0)
    cfg = NativePolicyConfig(dim=16, heads=2, layers=1, max_k=3, max_candidates=6, personal_features=False)
    old = NativePolicy.create(cfg, HandUsers(), hand_catalogue(), search_k=6)
    old.save(tmp_path / "p")
    # What code before the option wrote: no personal_features key, the seven catalogue features.
    meta_path = tmp_path / "p" / "policy.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["personal_features"]
    meta_path.write_text(json.dumps(meta))
    again = NativePolicy.load(tmp_path / "p", HandUsers(), hand_catalogue())
    assert not again.net.cfg.personal_features and again.net.cand.in_features == 7
    obs = _after_search(hand_env, again)
    assert again.featurizer.encode(obs)["cand_feats"].shape[-1] == 7
    assert len(again.act(obs, greedy=True).actions) == 3


def test_personal_features_are_saved_and_checked(tmp_path, hand_policy):
    import json

    assert hand_policy.net.cand.in_features == 11
    hand_policy.save(tmp_path / "p")
    meta = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert meta["features"][-4:] == ["rm_interest_pct", "rm_interest_z", "rm_conformity_z", "rm_scored"]
    meta["features"] = meta["features"][:7]
    (tmp_path / "p" / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="trained with candidate features"):
        NativePolicy.load(tmp_path / "p", HandUsers(), hand_catalogue())
