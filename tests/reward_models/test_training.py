"""Training end to end on a tiny synthetic dataset: exact resume, publish -> load round trip."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from data_pipelines.dataset import Dataset
from parpo_core.artefacts import Registry
from reward_models.data import RewardData
from reward_models.pipeline import evaluate_version, load_training_data, train_and_publish
from reward_models.readout import RewardModel
from reward_models.training import fit
from tests.plugins.rewards import reward_config

pytestmark = pytest.mark.integration

#: Batches of 128 give the tiny split's 462 train pairs 4 steps per epoch.
NO_STOP = ["train.early_stopping=false", "train.restore_best=false", "train.batch_size=128", "train.epochs=3"]


@pytest.fixture(scope="module")
def data(tiny_synth) -> RewardData:
    return RewardData.load(tiny_synth, "intervened")


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


def test_resume_is_exact_mid_epoch_and_at_epoch_end(data, tmp_path):
    per_epoch = math.ceil(data.n_train / 128)
    assert per_epoch >= 3
    mid = per_epoch + 2  # a step checkpoint in the middle of the second epoch
    full = fit(reward_config(*NO_STOP, f"train.checkpoint_every_n_steps={mid}"), data, tmp_path / "full")
    assert full.steps == 3 * per_epoch
    step_ckpt = tmp_path / "full" / "checkpoints" / f"step-{mid}.ckpt"
    assert step_ckpt.is_file()
    first = fit(reward_config(*NO_STOP[:-1], "train.epochs=1"), data, tmp_path / "end")
    for name, ckpt in (("mid", step_ckpt), ("end", first.checkpoint)):
        assert ckpt is not None
        rest = fit(reward_config(*NO_STOP), data, tmp_path / f"resumed-{name}", resume=ckpt)
        assert rest.steps == full.steps, name
        assert_same(full.tables, rest.tables)
    # the checkpoint carries the RNG states and loads with weights_only=True (no pickled objects)
    ckpt = torch.load(full.checkpoint, weights_only=True)
    assert "parpo_rng" in ckpt and "stream" in ckpt["RewardDataModule"]


def test_loss_stays_finite_and_logs_are_written(data, tmp_path):
    res = fit(
        reward_config(
            "train.epochs=4", "model.backbone=lightgcn", "model.n_layers=2", "model.conformity=embedding"
        ),
        data,
        tmp_path / "gcn",
    )
    assert res.logs is not None
    text = res.logs.read_text()
    assert "valid/ndcg@10" in text and "train/loss/discrepancy" in text and "nan" not in text.lower()
    assert all(torch.isfinite(t).all() for t in res.tables.values())
    # every evaluation is counted and timed, apart from training
    rows = [r for r in csv.DictReader(text.splitlines()) if r.get("valid/ndcg@10")]
    assert res.evaluations == len(rows) >= 1 and res.valid_seconds > 0
    assert res.summary()["evaluations"] == res.evaluations


def test_pointwise_exposure_term_trains_the_click_score_and_is_logged(tiny_synth, tmp_path):
    runs = {}
    for w in (0.0, 5.0):
        cfg = reward_config(*NO_STOP[:2], "train.epochs=2", f"exposure.pointwise={w}")
        data = load_training_data(cfg, Dataset(tiny_synth))
        assert data.exposure is not None and data.exposure.n_train > 0
        runs[w] = fit(cfg, data, tmp_path / str(w))
    text = runs[5.0].logs.read_text()
    assert "train/loss/exposure_pointwise" in text and "nan" not in text.lower()
    assert "exposure_pointwise" not in runs[0.0].logs.read_text()
    # the term changes what is learned (same seed, same triples otherwise)
    assert not torch.equal(runs[0.0].tables["item_interest"], runs[5.0].tables["item_interest"])


def test_pointwise_exposure_piece_is_the_log_loss_of_the_batchs_clicked_and_passed_pairs(tiny_synth):
    from reward_models.losses import exposure_pointwise
    from reward_models.training.datamodule import make_stream
    from reward_models.training.module import RewardModule

    cfg = reward_config("exposure.pointwise=2", "stage1.enabled=false")
    data = load_training_data(cfg, Dataset(tiny_synth))
    batch = next(iter(make_stream(data, cfg)))
    imp = batch["impression"]
    assert imp.any() and (~imp).any()  # sampled triples first, then the impressions
    module = RewardModule(data, cfg)
    b0 = float(module.exposure_bias)
    assert b0 == pytest.approx(math.log(data.n_train / data.exposure.n_train))
    loss = module.training_step(batch, 0)
    with torch.no_grad():
        t = module.model.tables()
        u = batch["user"]

        def click(users, items):
            return (t.user_all[users] * t.item_all[items]).sum(1)

        want = exposure_pointwise(
            click(u[~imp], batch["pos"][~imp]) + b0,
            click(u[imp], batch["neg"][imp]) + b0,
            float(batch["norm"]),
        )
    piece = module._epoch_loss[0].index("loss/exposure_pointwise")
    assert float(module._epoch_loss[1][piece]) == pytest.approx(float(want), rel=1e-5)
    loss.backward()
    assert module.exposure_bias.grad is not None and float(module.exposure_bias.grad) != 0.0
    # the same batch without the term: the total differs by exactly 2 x the piece
    off = RewardModule(data, reward_config("stage1.enabled=false", "exposure.pointwise=0"))
    assert off.exposure_bias is None
    assert float(loss) - float(off.training_step(batch, 0)) == pytest.approx(2 * float(want), rel=1e-4)


def test_held_out_log_loss_during_training_scores_the_evaluated_sample_of_users(tiny_synth):
    from reward_models.exposure import exposure_logloss
    from reward_models.training.datamodule import valid_sample
    from reward_models.training.module import RewardModule

    cfg = reward_config("stage1.enabled=false", "eval.valid_users=3")
    data = load_training_data(cfg, Dataset(tiny_synth))
    sample = valid_sample(data, cfg)
    assert sample.size == 3 < int((data.valid.lengths() > 0).sum())
    module = RewardModule(data, cfg)
    g = torch.Generator().manual_seed(0)
    module._user_click = torch.randn(data.n_users, 8, generator=g)
    module._item_click = torch.randn(data.n_items, 8, generator=g)
    got = module._selection_metrics()["valid/exposure_logloss"]
    want, pairs = exposure_logloss(module._user_click, module._item_click, data.valid, data.exposure, sample)
    everyone = exposure_logloss(module._user_click, module._item_click, data.valid, data.exposure)
    assert pairs > 0 and got == pytest.approx(want)
    assert everyone[1] > pairs and everyone[0] != pytest.approx(got)


def test_uniform_half_selection_ranks_a_fixed_sample_of_its_users(tiny_synth):
    from reward_models.selection import UNIFORM, load_uniform_half
    from reward_models.training.module import RewardModule

    full = load_uniform_half(RewardData.load(tiny_synth, "intervened"))
    everyone = RewardModule(RewardData.load(tiny_synth, "intervened"), reward_config("train.select=uniform"))
    assert everyone.selection == UNIFORM
    np.testing.assert_array_equal(everyone.half.select_users, full.select_users)
    n = full.select_users.size // 2
    cfg = reward_config("train.select=uniform", f"eval.valid_users={n}")
    module = RewardModule(RewardData.load(tiny_synth, "intervened"), cfg)
    again = RewardModule(RewardData.load(tiny_synth, "intervened"), cfg)
    picked = module.half.select_users
    assert picked.size == n and np.isin(picked, full.select_users).all() and (np.diff(picked) > 0).all()
    np.testing.assert_array_equal(picked, again.half.select_users)  # the same users every time
    np.testing.assert_array_equal(module.half.report_users, full.report_users)


@pytest.fixture(scope="module")
def published(tiny_synth, tmp_path_factory):
    root = tmp_path_factory.mktemp("reward-reg")
    out = train_and_publish(reward_config(), tiny_synth, root / "REG", root / "run", label="dice")
    assert out is not None
    return out, root / "REG"


def test_publish_writes_a_complete_version(published):
    out, reg = published
    v = Registry(reg).open("reward")
    assert v.name == out.version.name
    files = set(v.files())
    for f in ("weights/model.safetensors", "config.yaml", "metadata.json", "metrics.json", "lineage.json"):
        assert f in files
    assert {"idmaps/users.parquet", "idmaps/items.parquet", "logs/metrics.csv"} <= files
    m = json.loads((v.path / "metrics.json").read_text())
    assert m["schema_version"] == 1 and m["split"] == "intervened" and m["seed"] == 0
    for k in ("ndcg@10", "recall@10", "hit@10", "mrr@10", "gini@10"):
        assert k in m["test"]
    assert {"interest_spearman", "conformity_spearman", "uniform.ndcg@10"} <= set(m["synthetic"])
    assert "ndcg@10" in m["baselines"]["mostpop"]["test"]
    assert v.lineage.split.name == "intervened" and v.lineage.data_fingerprint == m["data_fingerprint"]
    # the dice preset's model: impressions as negatives, features, selection on the uniform half,
    # scalar conformity (the exported item conformity rows are fixed levels on one coordinate)
    assert m["selection"] == {"target": "uniform_half_ndcg@10", "metric": "valid/uniform_ndcg@10"}
    assert (
        m["report_half"]["source"] == "uniform_test" and "ndcg@10" in m["baselines"]["mostpop"]["report_half"]
    )
    meta = json.loads((v.path / "metadata.json").read_text())
    assert meta["model_version"] == 2 and meta["exposure"]["train_impressions"] > 0
    assert any(f.startswith("category=") for f in meta["features"]["item"])
    assert any(f.startswith("region=") for f in meta["features"]["user"])
    from safetensors.torch import load_file

    con = load_file(v.path / "weights" / "model.safetensors")["item_conformity"]
    assert float(con[:, 1:].abs().sum()) == 0.0 and len(set(con[:, 0].tolist())) > 1


def test_save_load_round_trip_gives_identical_scores(published, data):
    out, reg = published
    tensors = Registry(reg).open("reward").load_weights()
    rm = RewardModel.load(reg)
    rng = np.random.default_rng(0)
    warm_u = np.flatnonzero(data.seen_users())
    warm_i = np.flatnonzero(data.seen_items())
    u, i = rng.choice(warm_u, 50), rng.choice(warm_i, 50)
    got = rm.score([data.user_ids()[k] for k in u], [data.item_ids()[k] for k in i])
    ut, it = torch.from_numpy(u), torch.from_numpy(i)
    want_int = (tensors["user_interest"][ut] * tensors["item_interest"][it]).sum(-1).numpy()
    want_con = (tensors["user_conformity"][ut] * tensors["item_conformity"][it]).sum(-1).numpy()
    np.testing.assert_array_equal(got["interest"], want_int)
    np.testing.assert_array_equal(got["conformity"], want_con)
    np.testing.assert_array_equal(got["click"], want_int + want_con)
    assert not got["cold"].any()
    # a second load (by version folder) scores identically
    again = RewardModel.load(out.version.path).score(
        [data.user_ids()[k] for k in u], [data.item_ids()[k] for k in i]
    )
    np.testing.assert_array_equal(again["click"], got["click"])


def test_eval_on_the_same_data_reproduces_the_published_metrics(published, tiny_synth):
    out, reg = published
    path, result = evaluate_version(reg, tiny_synth)
    assert path.parent.name == "evals" and path.is_file()
    for part in ("valid", "test"):
        for k, v in out.metrics[part].items():
            assert result[part][k] == pytest.approx(v, rel=1e-6, abs=1e-9), (part, k)
    again, _ = evaluate_version(reg, tiny_synth)  # identical re-run: the same file, a no-op
    assert again == path and len(list(path.parent.glob("*.json"))) == 1


def test_the_stream_takes_the_batch_auto_resolves(data):
    from reward_models.training import make_stream

    cfg = reward_config("train.batch_size=auto")
    assert make_stream(data, cfg).batch_size == cfg.train.batch_for(data.n_train) == 1024
    assert make_stream(data, reward_config("train.batch_size=128")).batch_size == 128


def test_the_trainer_evaluates_at_the_interval_auto_resolves(tmp_path):
    from reward_models.training import make_trainer

    cfg = reward_config("train.eval_every_steps=auto", "train.batch_size=auto", "train.checkpoint=false")
    assert make_trainer(cfg, tmp_path, [], n_train=7448).val_check_interval == 10
    assert make_trainer(cfg, tmp_path, [], n_train=1_239_332).val_check_interval == 19
    by_epoch = make_trainer(reward_config("train.eval_every_steps=0"), tmp_path, [], n_train=1_239_332)
    assert by_epoch.check_val_every_n_epoch == 1
