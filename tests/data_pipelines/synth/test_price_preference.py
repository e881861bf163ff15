"""Per-user price preference (``price_preference``): off by default with the world byte for byte as
before the field; on, the true interest gains ``w * rho_u * x_i`` everywhere the truth is read."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import polars as pl
import pytest

from data_pipelines.synth import ContinueConfig, SynthConfig, Truth, generate, write, write_continuation
from data_pipelines.synth.world import price_position
from parpo_core.errors import DataError

SMALL = {"n_users": 60, "n_items": 50, "rounds": 2, "seed": 4}
MID = {"n_users": 400, "n_items": 200, "rounds": 4, "seed": 1}


def _h(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()[:16]


def test_default_world_is_byte_for_byte_the_one_before_the_field(tmp_path):
    # Pinned with the generator as it was before price_preference existed (commit ec9238f).
    data = generate(SynthConfig(**SMALL))
    assert _h(data.interactions.write_csv()) == "2c09f1a4d59db1cd"
    assert _h(data.uniform.write_csv()) == "0f7de713e4a2019d"
    assert _h(data.impressions.write_csv()) == "469faa2adeb2fbfa"
    assert data.world.price_taste is None
    write(SynthConfig(**SMALL), tmp_path / "w", splits=False)
    truth = tmp_path / "w" / "truth"
    assert _h((truth / "meta.json").read_bytes()) == "165e24ccb473d210"  # config without the field
    assert _h((truth / "README.md").read_bytes()) == "fb75f79aa6a0a4a8"
    assert not (truth / "price_preference.parquet").exists()
    assert "price_preference" not in json.loads((truth / "meta.json").read_text())["config"]
    assert SynthConfig(price_preference=0.0).digest() == SynthConfig().digest() == "2fd1ea7ffab96bf3"
    assert SynthConfig(price_preference=1.0).digest() != SynthConfig().digest()


def test_the_term_enters_every_reading_of_the_true_interest(tmp_path):
    cfg = SynthConfig(**MID, price_preference=1.0)
    data = generate(cfg)
    w, base = data.world, generate(SynthConfig(**MID)).world
    np.testing.assert_array_equal(w.user_vectors, base.user_vectors)  # its own stream: nothing else moves
    np.testing.assert_array_equal(w.price, base.price)
    rho = np.sign(w.price_taste)
    assert set(np.unique(rho)) == {-1.0, 1.0} and np.abs(w.price_taste).max() == 1.0
    assert 0.4 < (rho > 0).mean() < 0.6
    # x_i by hand for one item: (log p - log 30) / sqrt(0.5^2 + 0.4^2)
    assert price_position(cfg, np.array([30.0 * np.e]))[0] == pytest.approx(1 / np.sqrt(0.41))
    users, items = np.array([0, 1, 2, 3]), np.array([5, 5, 7, 9])
    vector_part = (w.user_vectors[users].astype(float) * w.item_vectors[items]).sum(1) / 4.0  # sqrt(16)
    x = (np.log(w.price[items]) - np.log(30.0)) / np.sqrt(0.41)
    np.testing.assert_allclose(w.interest(users, items), vector_part + rho[users] * x, atol=1e-9)

    write(cfg, tmp_path / "p", splits=False)
    truth = Truth(tmp_path / "p")
    imp = data.impressions
    np.testing.assert_allclose(truth.interest(imp["user_id"], imp["item_id"]), imp["interest"], atol=1e-9)
    stored = pl.read_parquet(tmp_path / "p" / "truth" / "interest.parquet")
    np.testing.assert_allclose(
        truth.interest_matrix().ravel(), stored["interest"].to_numpy(), atol=1e-5
    )  # float32 storage
    sub = truth.interest_matrix(["u0003", "u0001"], ["i0009", "i0005"])
    np.testing.assert_allclose(sub[1, 1], w.interest(np.array([1]), np.array([5]))[0], atol=1e-9)
    meta = json.loads((tmp_path / "p" / "truth" / "meta.json").read_text())
    assert meta["config"]["price_preference"] == 1.0 and "price_preference" in meta["model"]


def test_each_users_clicks_show_their_price_preference():
    data = generate(SynthConfig(**MID, price_preference=1.0))
    w = data.world
    main = data.impressions.filter((pl.col("split") == "main") & pl.col("click"))
    u = main["user_id"].str.slice(1).cast(pl.Int64).to_numpy()
    i = main["item_id"].str.slice(1).cast(pl.Int64).to_numpy()
    x, cheap = w.price_position[i], w.price_taste[u] < 0
    assert x[cheap].mean() < -0.3 and x[~cheap].mean() > 0.3  # shown items sit near 0 for both


def test_continuing_a_world_with_a_price_preference_is_one_error_line(tmp_path):
    write(SynthConfig(**SMALL, price_preference=0.5), tmp_path / "p", splits=False)
    with pytest.raises(DataError, match="price_preference .* not supported yet"):
        write_continuation(tmp_path / "p", tmp_path / "q", ContinueConfig(rounds=1))
