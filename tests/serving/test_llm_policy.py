"""An LLM policy end to end: ``parpo policy train --backend llm --lora`` publishes adapters with the
base model's sha256, ``PolicyBundle`` loads it by backend and ``/v1/act`` serves it with the same
response (Monte-Carlo propensities from N sampled episodes; ``explore: 0`` greedy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parpo.policy.llm.engine import Generation
from serving.acting import LoadedModel
from serving.schemas import ActRequest
from tests.serving.helpers import client, wait_ready

pytestmark = [pytest.mark.llm, pytest.mark.integration]
PARPO = [sys.executable, "-m", "parpo.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    env.pop("PARPO_POLICY_RUN_DIR", None)
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=900, env=env)


LLM_FAST = ["runtime.threads=1", "train.updates=1", "train.tasks_per_update=2", "train.group_size=2",
            "policy.max_new_tokens=16", "env.max_steps=2"]  # fmt: skip


@pytest.fixture(scope="module")
def llm_registry(tiny_synth, published_reward, tiny_llm, tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("llm-reg")
    reg = root / "REG"
    shutil.copytree(published_reward, reg)
    res = run("policy", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(root / "run"),
              "--backend", "llm", "--model", str(tiny_llm), "--lora", "4", "--json", *LLM_FAST)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["published"].startswith("policy/v000001")
    return reg, out["version"]


def test_the_published_version_holds_adapters_tokenizer_and_the_base_check(llm_registry, tiny_llm) -> None:
    from parpo.policy.llm.model import weights_sha256

    reg, _ = llm_registry
    (v,) = sorted((reg / "policy").glob("v*"))
    meta = json.loads((v / "metadata.json").read_text())
    assert meta["backend"] == "llm"
    llm = json.loads((v / "policy" / "llm.json").read_text())
    assert llm["lora"] is True and llm["config"]["lora"]["r"] == 4
    assert llm["base"] == {"path": str(Path(tiny_llm).resolve()), "sha256": weights_sha256(tiny_llm)}
    assert (v / "policy" / "adapter" / "adapter_model.safetensors").is_file()
    assert not (v / "policy" / "model").exists()  # only adapters are published
    assert (v / "policy" / "tokenizer" / "tokenizer.json").is_file()
    log = (v / "logs" / "metrics.csv").read_text()
    assert "reward/task/valid_calls/mean" in log and "llm/generated_tokens" in log


def test_the_server_answers_act_with_the_llm_policy(llm_registry, tmp_path) -> None:
    reg, version = llm_registry
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        r = c.post("/v1/act", json={"request_id": "r1", "user_id": "u0001", "k": 3})
        g = c.post("/v1/act", json={"request_id": "r2", "user_id": "u0001", "k": 3, "explore": 0})
    assert r.status_code == 200 and g.status_code == 200, r.text + g.text
    out, greedy = r.json(), g.json()
    assert out["policy_version"] == version and len(out["slate"]) == 3
    # a random model rarely writes a valid recommend: its answer is then the marked fallback
    if out["fallback"] is None:
        assert out["n_samples"] == 16 and out["evaluable"] is True
    else:
        assert (out["fallback"], out["fallback_reason"], out["n_samples"]) == ("popularity", "no_slate", 1)
    assert greedy["explore"] == 0.0 and greedy["evaluable"] is False


class TwoSlates:
    """Searches, then recommends c1, c2 or c2, c1 (prompts alternate): propensities 1/2."""

    def __init__(self, tok) -> None:
        self.tok = tok

    def generate(self, prompts, budgets, *, temperature, greedy, generator=None):
        out = []
        for j, b in enumerate(prompts):
            searched = "<|im_start|>tool" in self.tok.decode(b)
            text = ('{"tool": "recommend", "items": ["c1", "c2"]}' if j % 2 == 0 or greedy
                    else '{"tool": "recommend", "items": ["c2", "c1"]}') if searched else '{"tool": "search"}'  # fmt: skip
            ids = [*self.tok(text, add_special_tokens=False)["input_ids"], self.tok.eos_token_id]
            out.append(Generation(ids, [-0.1] * len(ids)))
        return out

    def sync(self, model) -> None:
        pass

    def score(self, ids) -> dict:
        return {}  # scripted: no weights, so no probe to check after a sync


def test_propensities_count_the_n_sampled_episodes(llm_registry) -> None:
    reg, _ = llm_registry
    m = LoadedModel.load(str(reg), None, seed=0)
    m.bundle.policy.engine = TwoSlates(m.bundle.policy.tokenizer)
    m.bundle.policy.cfg = m.bundle.policy.cfg.model_copy(update={"max_new_tokens": 64})
    m.bundle.policy.chat.max_new_tokens = 64
    (a,) = m.act([ActRequest(request_id="r", user_id="u0001", k=2)], n_samples=8, temperature=1.0)
    res = a.response
    assert res["n_samples"] == 8 and res["fallback"] is None
    assert [s["propensity"] for s in res["slate"]] == [0.5, 0.5]
    assert [a.tool for a in res["plan"]] == ["search", "recommend"]
    (g,) = m.act(
        [ActRequest(request_id="g", user_id="u0001", k=2, explore=0.0)], n_samples=8, temperature=1.0
    )
    assert g.response["n_samples"] == 1 and [s["propensity"] for s in g.response["slate"]] == [1.0, 1.0]


def _error_line(res) -> str:
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    return lines[0]


def test_bad_llm_options_are_one_line(tmp_path) -> None:
    base = ["policy", "train", "-d", str(tmp_path), "-r", str(tmp_path / "REG")]
    assert "options of --backend llm" in _error_line(run(*base, "--model", str(tmp_path)))
    assert "needs --model PATH" in _error_line(run(*base, "--backend", "llm"))
    assert "unknown policy backend 'gpt'; known: llm, native" in _error_line(run(*base, "--backend", "gpt"))
    line = _error_line(run(*base, "--backend", "llm", "--model", str(tmp_path), "policy.engine=tgi"))
    assert "policy.engine" in line
