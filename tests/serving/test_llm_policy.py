"""An LLM policy end to end: ``parpo policy train --backend llm --lora`` publishes adapters with the
base model's sha256, ``PolicyBundle`` loads it by backend and ``/v1/act`` serves it with the same
response (Monte-Carlo propensities from N sampled episodes; ``explore: 0`` greedy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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


def _with_memory(reg: Path, version: str, strategy: str) -> str:
    """``version`` published again with a skill memory shown as 2 texts: skills of user u0001
    (searching by ``strategy``) over three scenarios; returns the new version's name."""
    from parpo.memory.config import MemoryConfig
    from parpo.memory.graph import SkillGraph
    from parpo.memory.policy_memory import PolicyMemory
    from parpo.memory.scenario import Query
    from parpo.memory.trajectory import Trajectory
    from parpo.policy.bundle import ANCHORS, CATALOGUE, KIND, POLICY_DIR, PolicyBundle
    from parpo_core.artefacts import Registry

    bundle = PolicyBundle.load(reg, version)
    policy, index = bundle.policy, bundle.reward_model.user_index
    graph = SkillGraph(MemoryConfig())
    plan, rewards = (f"search:{strategy}+c", "recommend"), {"task_quality": 1.0, "preference": 0.9}
    trajectories = [
        Trajectory(f"t{k}", index["u0001"], Query(None, cap), plan, strategy, True, (), k, rewards)
        for cap, k in [(9.0, 3), (None, 4), (200.0, 5)]
    ]
    n = len(index)
    graph.write(trajectories, anchors={"preference": (np.zeros(n), np.ones(n, dtype=np.int64))})
    policy.cfg = policy.cfg.model_copy(update={"memory_skills": 2})
    policy.memory = PolicyMemory(graph, index)
    out = reg.parent / f"pol-{strategy}"
    policy.save(out)
    v = Registry(reg).open(KIND, version)
    files = {POLICY_DIR: out, CATALOGUE: v.file(CATALOGUE), ANCHORS: v.file(ANCHORS)}
    config = v.config | {"policy": v.config["policy"] | {"memory_skills": 2}}
    return (
        Registry(reg).publish(KIND, lineage=v.lineage, config=config, metadata=v.metadata, files=files).name
    )


def test_the_answer_names_the_skills_the_prompt_listed_and_they_swap_on_reload(
    llm_registry, tmp_path, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    from parpo.policy.llm import engine
    from tests.plugins.llm import RoutedEngine, user_content

    base, version = llm_registry
    reg = tmp_path / "REG"
    shutil.copytree(base, reg)
    (v_pop, v_price) = (_with_memory(reg, version, s) for s in ("popularity", "price_asc"))
    routed = RoutedEngine(AutoTokenizer.from_pretrained(reg / "policy" / version / "policy" / "tokenizer"))
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: routed)
    monkeypatch.setenv("PARPO_ADMIN_TOKEN", "s3cret")

    def act(c) -> tuple[list[dict], set[tuple[str, ...]], object]:
        routed.prompts.clear()
        r = c.post("/v1/act", json={"request_id": "r", "user_id": "u0001", "k": 3})
        assert r.status_code == 200, r.text
        listed = {tuple(json.loads(user_content(p)).get("skills", ())) for p in routed.prompts}
        return r.json()["skills"], listed, c.app.state.serve.manager.current

    with client(reg, tmp_path / "ev", policy=v_pop) as c:
        wait_ready(c)
        first, listed, model = act(c)
        graph = model.bundle.policy.memory.graph
        clock, size = graph.clock, len(graph)
        # the server names the 2 skills whose texts every prompt of the request listed
        assert len(first) == 2 and listed == {tuple(graph.text(graph.sid_slot[s["skill_id"]]) for s in first)}
        assert (graph.clock, len(graph)) == (clock, size)  # serving never writes the memory
        r = c.post("/v1/models/reload", json={"version": v_price}, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 202
        end = time.monotonic() + 60
        while c.get("/v1/models").json()["serving"]["policy_version"] != v_price:
            assert time.monotonic() < end
            time.sleep(0.05)
        second, listed, model = act(c)
    graph = model.bundle.policy.memory.graph
    assert len(second) == 2 and listed == {tuple(graph.text(graph.sid_slot[s["skill_id"]]) for s in second)}
    assert {p for s in first for p in s["plan"]} == {"search:popularity+c", "recommend"}
    assert {p for s in second for p in s["plan"]} == {"search:price_asc+c", "recommend"}
    for s in first + second:
        assert s["reason"]["path"][-1] == f"skill:{s['skill_id']}"
        assert s["reason"]["score"] == pytest.approx(sum(s["reason"]["terms"].values()))
