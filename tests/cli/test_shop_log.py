"""A shop's own log, mapped as the README shows (columns user, item, time, event, amount; no
category, no item table), goes through the whole CLI: ingest, reward train, policy train, eval.
Its requests are open ones (no category, no attributes, no prices: empty), as the API accepts."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.cli.test_policy import FAST, run
from tests.plugins.data import TINY
from tests.plugins.rewards import FAST as REWARD_FAST

pytestmark = pytest.mark.integration


def _shop_export(tmp: Path) -> tuple[Path, Path]:
    """The tiny synthetic log as a shop exports it: own column and event names, no impressions."""
    from data_pipelines.synth import write_csv

    raw = tmp / "raw.csv"
    write_csv(TINY, raw, columns=["user_id", "item_id", "ts", "event", "value"])
    shop = tmp / "export.csv"
    (
        pl.read_csv(raw)
        .filter(pl.col("event") != "impression")
        .with_columns(
            pl.col("event").replace({"click": "detail", "cart": "basket", "buy": "order", "fav": "wish"})
        )
        .rename({"user_id": "user", "item_id": "item", "ts": "time", "value": "amount"})
        .write_csv(shop)
    )
    mapping = tmp / "shop-map.yaml"
    mapping.write_text(
        "columns: {user: user_id, item: item_id, time: ts, event: event, amount: value}\n"
        "events: {detail: click, basket: cart, order: buy, wish: fav}\n"
        "timestamp: iso8601\n"
    )
    return shop, mapping


def test_a_log_without_categories_trains_and_evaluates_an_agent(tmp_path):
    shop, mapping = _shop_export(tmp_path)
    data, reg = tmp_path / "shop", tmp_path / "REG"
    res = run(
        "data",
        "ingest",
        "--source",
        "canonical",
        "--input",
        str(shop),
        "--map",
        str(mapping),
        "--out",
        str(data),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    items = pl.read_parquet(data / "items.parquet")
    assert items["category"].null_count() == items.height  # nothing to scope a request by
    res = run("reward", "train", "-d", str(data), "-r", str(reg), "-o", str(tmp_path / "rrun"), *REWARD_FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    res = run("policy", "train", "-d", str(data), "-r", str(reg), "-o", str(tmp_path / "prun"), *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "published policy/v000001" in res.stdout
    res = run("policy", "eval", "-r", str(reg), "-d", str(data), "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["warm"]["n_tasks"] > 0 and 0 <= out["warm"]["policy"]["task_quality"] <= 1
    per_task = pl.read_parquet(next((reg / "policy").glob("v*/evals/*.tasks.parquet")))
    # An empty request: every item meets it, so a slate of known distinct items meets it fully.
    assert per_task.filter(pl.col("agent") == "greedy_reward")["task/constraints"].min() == 1.0
