"""``parpo retrain`` as a cron job runs it, on a drifting synthetic world (docs/retraining.md).

The world: 600 users x 400 items for 8 rounds (the base's data), then 2 more rounds with 60
new users, 200 new items and 30% of users' interests turned (``parpo data synth
--continue-from``). The base is a small DICE model trained on the first part.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_pipelines.synth import SynthConfig, write, write_continuation
from data_pipelines.synth.drift import ContinueConfig
from parpo.trainer.pipeline import train_and_publish as policy_train
from tests.cli.test_cli import _one_error_line
from tests.plugins.policies import fast_config
from tests.plugins.rewards import reward_config
from tests.serving.helpers import client, small_config, wait_ready

pytestmark = pytest.mark.integration

PARPO = [sys.executable, "-m", "parpo.cli.main"]
WORLD = SynthConfig(n_users=600, n_items=400, rounds=8, seed=3)
DRIFT = ContinueConfig(rounds=2, new_users=60, new_items=200, interest_drift=0.3)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = os.environ | {"OMP_NUM_THREADS": "1"} | (env or {})
    e.pop("PARPO_REWARD_RUN_DIR", None)
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=600, env=e)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """The base's data (``dir``), the drifted data (``new``) and a registry (``reg``) holding
    the base reward model as production; tests copy ``reg`` before changing it."""
    from reward_models.pipeline import train_and_publish

    root = tmp_path_factory.mktemp("retrain")
    write(WORLD, root / "dir")
    write_continuation(root / "dir", root / "new", DRIFT)
    cfg = reward_config("train.epochs=15")
    assert train_and_publish(cfg, root / "dir", root / "reg", root / "run", label="dice")
    reg = root / "reg"
    shutil.copytree(reg, root / "reg-policy")  # the same reward model and a policy trained on it
    assert policy_train(fast_config(updates=3), root / "dir", root / "reg-policy", run_dir=root / "prun")
    return {"dir": root / "dir", "new": root / "new", "reg": reg, "reg-policy": root / "reg-policy"}


@pytest.fixture
def reg(world, tmp_path) -> Path:
    shutil.copytree(world["reg"], tmp_path / "REG")
    return tmp_path / "REG"


def versions(reg: Path, kind: str = "reward") -> list[str]:
    return sorted(p.name for p in (reg / kind).glob("v*"))


def pointer(reg: Path, name: str, kind: str = "reward") -> str | None:
    p = reg / kind / f"{name}.json"
    return json.loads(p.read_text())["version"] if p.is_file() else None


def retrain(reg: Path, data: Path, *extra: str, env: dict[str, str] | None = None):
    return run("retrain", "--registry", str(reg), "--data", str(data), "--json", *extra, env=env)


def test_drifted_world_is_promoted_and_a_second_run_creates_nothing(world, reg):
    base = pointer(reg, "production")
    res = retrain(reg, world["new"])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    cand = out["candidate"]["reward"]
    assert out["status"] == "promoted" and out["gate"]["passed"] and not out["replayed"]
    assert pointer(reg, "production") == cand != base
    assert out["promoted"] == {"reward": cand} and out["base"] == {"reward": base}
    lineage = json.loads((reg / "reward" / cand / "lineage.json").read_text())
    record = json.loads((reg / "retrain" / out["key"] / "reward.json").read_text())
    assert lineage["parent"] == base and lineage["extra"]["retrain_key"] == record["train_key"]
    warm = lineage["extra"]["warm_start"]  # 600 + 60 users, 400 + 200 items
    assert warm["users_copied"] + warm["users_from_profile"] == 660
    assert (
        warm["items_copied"] + warm["items_from_attributes"] == 600 and warm["items_from_attributes"] >= 200
    )
    steps = {p.stem for p in (reg / "retrain" / out["key"]).glob("*.json")}
    assert steps == {"read", "heldout", "reward", "eval", "gate", "promote", "outcome"}
    gate = json.loads((reg / "retrain" / out["key"] / "gate.json").read_text())
    assert set(gate["heldout"]) == {"old", "new"} and all(len(f) == 64 for f in gate["heldout"].values())
    assert [c["margin"] for c in gate["checks"]] == [0.02, 0.02, 0.0, 0.0]  # the default gate's
    # the same inputs again: the first run's record and code, no new version
    again = retrain(reg, world["new"])
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == out | {"replayed": True}
    assert versions(reg) == [base, cand]
    hist = json.loads(run("registry", "history", "--registry", str(reg), "--json").stdout)
    assert [(h["version"], h["parent"], (h["gate"] or {}).get("status")) for h in hist] == [
        (base, None, None),
        (cand, base, "promoted"),
    ]


def test_broken_retrain_is_gated_and_production_untouched(world, reg):
    base = pointer(reg, "production")
    before = (reg / "reward" / "production.json").read_bytes()
    res = retrain(reg, world["new"], "--lr-scale", "100")  # lr 1.0: 100x the preset's
    assert res.returncode == 3, res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "gated" and not out["gate"]["passed"] and out["gate"]["why"]
    assert (reg / "reward" / "production.json").read_bytes() == before
    assert pointer(reg, "challenger") == out["candidate"]["reward"] != base
    again = retrain(reg, world["new"], "--lr-scale", "100")
    assert again.returncode == 3 and json.loads(again.stdout)["replayed"]
    assert len(versions(reg)) == 2
    # another gate judges the same candidate: nothing is trained again
    lenient = Path(reg.parent / "lenient.yaml")
    lenient.write_text("reward:\n  - {set: old, metric: hit@10, margin: 1.0}\n")
    res = retrain(reg, world["new"], "--lr-scale", "100", "--gate", str(lenient))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["candidate"] == out["candidate"] and len(versions(reg)) == 2
    assert pointer(reg, "production") == out["candidate"]["reward"] and pointer(reg, "challenger") is None


@pytest.mark.parametrize("point", ["reward-published", "after-gate", "reward-promoted"])
def test_a_killed_retrain_leaves_the_registry_consistent_and_the_rerun_finishes(world, reg, point):
    base = pointer(reg, "production")
    res = retrain(reg, world["new"], env={"PARPO_RETRAIN_CRASH_AT": point})
    assert res.returncode == -9, res.stderr  # SIGKILL
    assert pointer(reg, "production") == (base if point != "reward-promoted" else versions(reg)[-1])
    check = run("registry", "verify", "--registry", str(reg))
    assert check.returncode == 0, check.stderr
    res = retrain(reg, world["new"])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "promoted" and len(versions(reg)) == 2  # one candidate, never two
    assert pointer(reg, "production") == out["candidate"]["reward"]


def test_no_new_data_is_an_outcome_not_an_error(world, reg):
    res = retrain(reg, world["dir"])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "no_new_data"
    assert len(versions(reg)) == 1
    line = _one_error_line(retrain(reg, world["new"], "--policy"))  # this registry holds no policy
    assert "no policy versions yet" in line


def test_data_that_does_not_extend_the_base_is_one_line(world, reg, tmp_path):
    other = tmp_path / "other"
    write(SynthConfig(n_users=50, n_items=40, rounds=2, seed=11), other, splits=False)
    line = _one_error_line(retrain(reg, other))
    assert "does not extend the base's" in line
    base_fp = json.loads((reg / "reward" / versions(reg)[0] / "lineage.json").read_text())["data_fingerprint"]
    from data_pipelines.dataset import Dataset

    assert base_fp[:12] in line and Dataset(other).fingerprint[:12] in line
    assert len(versions(reg)) == 1


def test_a_corrupted_base_is_one_line_and_touches_nothing(world, reg):
    weights = reg / "reward" / versions(reg)[0] / "weights" / "model.safetensors"
    weights.chmod(0o644)
    with open(weights, "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02\x03")
    line = _one_error_line(retrain(reg, world["new"]))
    assert "corrupted version" in line
    assert len(versions(reg)) == 1 and not list((reg / "retrain").glob("*/*.json"))
    line = _one_error_line(retrain(reg, world["new"], "--window", "last:week"))
    assert "--window 'last:week'" in line
    line = _one_error_line(retrain(reg, world["new"], "--anchors", "keep"))
    assert line == "error: --anchors: Input should be 'carry', 'decay' or 'reset' (got 'keep')"


def test_a_second_retrain_waits_for_the_lock_and_says_so(world, reg):
    (reg / "retrain").mkdir()
    fd = os.open(reg / "retrain" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    e = os.environ | {"OMP_NUM_THREADS": "1"}
    args = ["retrain", "--registry", str(reg), "--data", str(world["dir"])]
    proc = subprocess.Popen([*PARPO, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 120)
        assert ready, "the second retrain printed nothing while waiting"
        assert "waiting for another retrain" in proc.stderr.readline()
        assert proc.poll() is None
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert proc.wait(timeout=300) == 0
    assert "no_new_data" in proc.stdout.read()


def test_a_bad_gate_config_names_the_key(world, reg, tmp_path):
    bad = tmp_path / "gate.yaml"
    bad.write_text("reward:\n  - {set: new, metric: ndcg@10, margn: 0.1}\n")
    line = _one_error_line(retrain(reg, world["new"], "--gate", str(bad)))
    assert line.startswith(f"error: {bad}: reward.0.margin: Field required")


def test_policy_retrain_moves_the_reward_pointer_first_and_the_policy_last(world, tmp_path):
    reg = tmp_path / "REG"
    shutil.copytree(world["reg-policy"], reg)
    base_reward, base_policy = pointer(reg, "production"), pointer(reg, "production", "policy")
    lenient = tmp_path / "lenient.yaml"  # the mechanics, not the statistics: every check passes
    lenient.write_text(
        "reward:\n  - {set: new, metric: ndcg@10, margin: 1.0}\n"
        "policy:\n  - {set: warm, metric: hit@10, margin: 1.0}\n"
    )
    args = ("--policy", "--policy-updates", "2", "--gate", str(lenient))
    res = retrain(reg, world["new"], *args, env={"PARPO_RETRAIN_CRASH_AT": "reward-promoted"})
    assert res.returncode == -9, res.stderr
    # killed between the two moves: a server following production still answers with the base
    # policy and the reward version its lineage names, not the reward pointer's new target
    cand_reward = pointer(reg, "production")
    assert cand_reward != base_reward and pointer(reg, "production", "policy") == base_policy
    with client(reg, tmp_path / "events", cfg=small_config(poll_s=0.05)) as c:
        wait_ready(c)
        serving = c.get("/v1/models").json()["serving"]
        assert (serving["policy_version"], serving["reward_version"]) == (base_policy, base_reward)
        res = retrain(reg, world["new"], *args)  # the rerun completes the promotion
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        end = time.monotonic() + 60
        while c.get("/v1/models").json()["serving"]["policy_version"] != out["candidate"]["policy"]:
            assert time.monotonic() < end, "the server did not follow the promotion"
            time.sleep(0.05)
        act = c.post("/v1/act", json={"request_id": "after-retrain", "user_id": "u0001"}).json()
        assert (act["policy_version"], act["reward_version"]) == (out["candidate"]["policy"], cand_reward)
    assert "completing the promotion an interrupted retrain began" in res.stderr
    assert out["promoted"] == out["candidate"] and out["candidate"]["reward"] == cand_reward
    cand_policy = out["candidate"]["policy"]
    assert pointer(reg, "production", "policy") == cand_policy != base_policy
    assert len(versions(reg, "policy")) == 2 and len(versions(reg)) == 2
    lineage = json.loads((reg / "policy" / cand_policy / "lineage.json").read_text())
    assert lineage["parent"] == base_policy and lineage["reward"] == cand_reward
    warm = lineage["extra"]["warm_start"]
    assert warm["items_from_features"] == 200 and warm["anchors"] == "decay" and warm["anchor_users"] > 0
    gate = json.loads((reg / "retrain" / out["key"] / "gate.json").read_text())
    assert [(c["kind"], c["set"], c["result"]) for c in gate["checks"]] == [
        ("reward", "new", "pass"),
        ("policy", "warm", "pass"),
    ]
