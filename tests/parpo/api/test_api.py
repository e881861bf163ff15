"""``parpo.api``: the README's "Use from Python" section as it is written, ``load_policy().act``
against the server's own answers, one-line errors, and no environment left behind."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from parpo import api
from parpo_core.artefacts import Registry
from parpo_core.errors import UserError
from tests.serving.helpers import wait_ready

ROOT = Path(__file__).resolve().parents[3]
RUN_DIR_VARS = ("PARPO_REWARD_RUN_DIR", "PARPO_POLICY_RUN_DIR")


def readme_python() -> str:
    section = (ROOT / "README.md").read_text().split("\n## Use from Python\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_every_public_function_is_keyword_only_and_documented():
    """docs/api.md's rule: the names in ``__all__`` are the API; their parameters are keywords
    (``load_policy``'s registry and version may also be positional, as in ``load_policy(REG, V)``)."""
    doc = (ROOT / "docs" / "api.md").read_text()
    for name in api.__all__:
        obj = getattr(api, name)
        assert f"`{name}" in doc, name
        assert obj.__doc__, name
        if inspect.isfunction(obj):
            positional = [
                p.name
                for p in inspect.signature(obj).parameters.values()
                if p.kind is p.POSITIONAL_OR_KEYWORD
            ]
            assert positional == (["registry", "version"] if name == "load_policy" else []), name


@pytest.mark.integration
def test_the_readme_python_section_runs_on_a_tiny_world(tmp_path, monkeypatch, capsys):
    for var in RUN_DIR_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(readme_python(), "README.md", "exec"), ns)  # noqa: S102  (the README's own code)

    reg = Registry(tmp_path / "parpo-work" / "registry")
    assert ns["reward"].version.name == reg.resolve("reward").name
    assert ns["policy"].version.name == reg.resolve("policy").name == ns["agent"].version
    assert ns["policy"].version.lineage.reward == ns["reward"].version.name
    # the run folders are the ones given, each with its resolved config
    assert (tmp_path / "parpo-work" / "runs" / "reward" / "config.yaml").is_file()
    assert (tmp_path / "parpo-work" / "runs" / "policy" / "config.yaml").is_file()
    assert not any(var in os.environ for var in RUN_DIR_VARS)  # no environment side effect
    ev = ns["evaluation"]
    assert ev.path.resolve().parent == reg.open("policy", ns["policy"].version.name).path / "evals"
    warm = ev.result["warm"]
    assert warm["n_tasks"] == min(200, warm.get("tasks_available", warm["n_tasks"])) > 0
    answer = ns["answer"]
    assert answer["policy_version"] == ns["policy"].version.name and answer["request_id"] == "r1"
    assert [e["position"] for e in answer["slate"]] == list(range(1, len(answer["slate"]) + 1))
    assert ns["report"].html.is_file() and ns["report"].summary.is_file()
    printed = capsys.readouterr().out
    assert f"recorded in {ev.path}" in printed


def test_act_answers_what_the_server_answers(serve_registry, tmp_path):
    """Greedy requests (deterministic) through ``load_policy().act`` and through ``POST /v1/act``
    of ``create_app``: the same plan, slate, scores and versions."""
    reg, (v1, v2) = serve_registry
    bodies = [
        {"request_id": "a", "user_id": "u0001", "k": 4, "explore": 0},
        {"request_id": "b", "user_id": "u0007", "k": 3, "explore": 0, "request": {"category": "c1"}},
        {"request_id": "c", "user_id": "someone-new", "k": 5, "explore": 0},
    ]
    ours = api.load_policy(reg, v2).act(bodies)
    app = api.create_app(registry=reg, events=tmp_path / "ev", policy=v2, overrides=["poll_s=0"])
    with TestClient(app) as c:
        wait_ready(c)
        theirs = [c.post("/v1/act", json=b).json() for b in bodies]
    for o, t in zip(ours, theirs, strict=True):
        assert o["logged"] is False and t["logged"] is True  # only the server keeps a decision log
        assert {k: v for k, v in o.items() if k != "logged"} == {k: v for k, v in t.items() if k != "logged"}
    assert ours[0]["policy_version"] == v2 and ours[2]["cold_user"] is True


def test_act_refuses_a_bad_body_in_one_line(serve_registry):
    reg, (v1, _) = serve_registry
    policy = api.load_policy(reg, v1)
    assert policy.version == v1 and policy.act([]) == []
    with pytest.raises(UserError, match=r"^requests\[1\]: k: Input should be greater than or equal to 1$"):
        policy.act([{"request_id": "ok", "user_id": "u1"}, {"request_id": "x", "user_id": "u1", "k": 0}])


def test_create_app_refuses_a_file_for_events_and_an_unknown_version(serve_registry, tmp_path):
    reg, _ = serve_registry
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(UserError, match=r"^events .*afile is a file; give a folder$"):
        api.create_app(registry=reg, events=afile)
    with pytest.raises(UserError, match="v000099"):
        api.create_app(registry=reg, events=tmp_path / "ev", policy="v000099")


def test_a_config_object_with_overrides_is_refused(tmp_path):
    from parpo.api.configs import resolved

    cfg = resolved("data")
    with pytest.raises(UserError, match="overrides go with a preset name"):
        api.synth(out=tmp_path / "d", config=cfg, overrides=["split.seed=1"])
