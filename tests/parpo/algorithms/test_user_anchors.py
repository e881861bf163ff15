"""Anchor store: EMA math by hand, exact shard merging, persistence, threads, 2-rank gloo."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from parpo.algorithms import (
    AnchorSnapshot,
    AnchorStore,
    load_anchors,
    merge_user_batch_stats,
    save_anchors,
    user_batch_stats,
)

F64 = torch.float64


def upd(store: AnchorStore, users: list[int], rewards: list[float]) -> dict[str, float]:
    return store.update(torch.tensor(users), torch.tensor(rewards, dtype=F64))


def row(store: AnchorStore, u: int) -> tuple[float, float, int]:
    s = store.snapshot()
    return float(s.mean[u]), float(s.var[u]), int(s.count[u])


def test_ema_math_with_warmup_by_hand() -> None:
    store = AnchorStore(alpha=0.5)
    # batch 1, user 0 rewards [1, 3]: first update, a = 1 -> mu = 2, var = population var 1
    m = upd(store, [0, 0, 2], [1.0, 3.0, 7.0])
    assert row(store, 0) == pytest.approx((2.0, 1.0, 1)) and row(store, 2) == pytest.approx((7.0, 0.0, 1))
    assert m == {"anchors/users": 2.0, "anchors/updated": 2.0, "anchors/new": 2.0}
    assert row(store, 1) == (0.0, 0.0, 0)  # never seen
    # batch 2, user 0 reward [4]: a = max(.5, 1/2) = .5, delta = 2
    #   mu = 2 + .5 * 2 = 3; var = .5 * 1 + .5 * 0 + .5 * .5 * 4 = 1.5
    #   (the equal mixture of {1, 3} and {4}: E[x] = 3, E[x^2] = (1 + 9) / 4 + 16 / 2 = 10.5 -> var 1.5)
    upd(store, [0], [4.0])
    assert row(store, 0) == pytest.approx((3.0, 1.5, 2))
    # batch 3, user 0 rewards [0, 2]: rbar 1, v_b 1, a = max(.5, 1/3) = .5, delta = -2
    #   mu = 3 - 1 = 2; var = .5 * 1.5 + .5 * 1 + .25 * 4 = 2.25
    upd(store, [0, 0], [0.0, 2.0])
    assert row(store, 0) == pytest.approx((2.0, 2.25, 3))
    assert store.n_obs()[0] == 5 and len(store) == 2


def test_ema_math_without_warmup_by_hand() -> None:
    store = AnchorStore(alpha=0.1, warmup=False)
    upd(store, [0, 0], [1.0, 3.0])  # first update initialises: mu 2, var 1
    # a = .1, delta = 2: mu = 2.2; var = .9 * 1 + .1 * 0 + .1 * .9 * 4 = 1.26 (= (1 - a)(var + a delta^2))
    upd(store, [0], [4.0])
    assert row(store, 0) == pytest.approx((2.2, 1.26, 2))


def test_warmup_gives_the_plain_mean_of_batch_means_early() -> None:
    store = AnchorStore(alpha=0.01)
    for r in (1.0, 2.0, 6.0):
        upd(store, [3], [r])
    mu, var, c = row(store, 3)
    # a = 1, 1/2, 1/3: mean of {1, 2, 6} = 3, population variance (4 + 1 + 9) / 3 = 14/3
    assert (mu, var, c) == pytest.approx((3.0, 14 / 3, 3))


def test_snapshot_is_pre_update_copy_and_lookup_pads_unknown_users() -> None:
    store = AnchorStore()
    upd(store, [1], [0.5])
    snap = store.snapshot()
    upd(store, [1], [1.0])
    assert float(snap.mean[1]) == 0.5 and int(snap.count[1]) == 1
    mu, var, count = snap.lookup(torch.tensor([1, 0, 5, -1]))
    assert (
        mu.tolist() == [0.5, 0.0, 0.0, 0.0] and count.tolist() == [1, 0, 0, 0] and var.tolist() == [0.0] * 4
    )
    empty = AnchorSnapshot.from_lists([], [], [])
    assert empty.lookup(torch.tensor([0, 2]))[2].tolist() == [0, 0]


def test_merging_shards_equals_stats_of_the_whole_batch() -> None:
    users = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2])
    rewards = torch.tensor([0.1, 0.5, 0.3, 1.0, 0.7, 0.8, 0.0, 0.4], dtype=F64)
    whole = user_batch_stats(users, rewards)
    parts = [user_batch_stats(users[s], rewards[s]) for s in (slice(0, 3), slice(3, 3), slice(3, 8))]
    merged = merge_user_batch_stats(parts)
    assert torch.equal(merged.user, whole.user) and torch.equal(merged.n, whole.n)
    assert torch.allclose(merged.mean, whole.mean) and torch.allclose(merged.m2, whole.m2)
    # user 0: [.1, .3, .8] -> n 3, mean .4, m2 = .09 + .01 + .16 = .26
    assert (float(whole.n[0]), float(whole.mean[0]), float(whole.m2[0])) == pytest.approx((3, 0.4, 0.26))


def test_persistence_round_trip_is_atomic(tmp_path: Path) -> None:
    store = AnchorStore(alpha=0.2, warmup=False)
    upd(store, [0, 0, 4, 9], [0.2, 0.6, 1.0, 0.5])
    upd(store, [4, 9], [0.0, 0.25])
    path = tmp_path / "ckpt" / "anchors.parquet"
    save_anchors(store, path)
    save_anchors(store, path)  # overwriting is a plain os.replace
    assert sorted(p.name for p in path.parent.iterdir()) == ["anchors.parquet"]  # no temp files left
    loaded = load_anchors(path)
    a, b = store.snapshot(), loaded.snapshot()
    assert len(a) == len(b) == 10  # users 0..9, of which 0, 4, 9 have history
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    assert torch.equal(a.count, b.count) and torch.equal(store.n_obs(), loaded.n_obs())
    assert (loaded.alpha, loaded.warmup, len(loaded)) == (0.2, False, 3)
    table = pq.read_table(path)
    assert table.column_names == ["user", "mean", "var", "count", "n_obs"]
    assert table.column("user").to_pylist() == [0, 4, 9]
    # a loaded store keeps updating exactly like the original
    upd(store, [9, 11], [1.0, 0.3])
    upd(loaded, [9, 11], [1.0, 0.3])
    assert torch.equal(store.snapshot().mean, loaded.snapshot().mean)


def test_load_rejects_a_foreign_parquet(tmp_path: Path) -> None:
    pq.write_table(pa.table({"user": [0]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="not a PARPO anchor file"):
        load_anchors(tmp_path / "x.parquet")


def test_concurrent_updates_lose_nothing() -> None:
    store = AnchorStore(alpha=0.05)
    n_threads, n_updates = 8, 50

    def work(k: int) -> None:
        for _ in range(n_updates):
            store.update(torch.tensor([0, 1 + k]), torch.tensor([1.0, float(k)], dtype=F64))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    snap = store.snapshot()
    assert int(snap.count[0]) == n_threads * n_updates and float(snap.mean[0]) == pytest.approx(1.0)
    assert snap.count[1 : 1 + n_threads].tolist() == [n_updates] * n_threads
    assert snap.mean[1 : 1 + n_threads].tolist() == pytest.approx([float(k) for k in range(n_threads)])


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="alpha"):
        AnchorStore(alpha=0.0)
    with pytest.raises(ValueError, match=">= 0"):
        upd(AnchorStore(), [-1], [0.5])
    with pytest.raises(ValueError, match=r"\[B\]"):
        AnchorStore().update(torch.tensor([0, 1]), torch.tensor([0.5]))


# ----------------------------------------------------------------------------- data parallel (gloo)


def test_all_gather_keeps_ranks_identical_and_equal_to_one_process(tmp_path: Path) -> None:
    """Two real processes in a gloo group (parpo_anchor_dp_worker.py), each with its own shard."""
    worker = Path(__file__).with_name("parpo_anchor_dp_worker.py")
    spec = importlib.util.spec_from_file_location("parpo_anchor_dp_worker", worker)
    assert spec is not None and spec.loader is not None
    shared = importlib.util.module_from_spec(spec)  # the worker's shards, by path: no package assumptions
    spec.loader.exec_module(shared)
    ALPHA, HISTORY, SHARDS = shared.ALPHA, shared.HISTORY, shared.SHARDS
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(rank), str(tmp_path / "init"), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs

    g0, g1 = (torch.load(tmp_path / f"gathered{r}.pt") for r in (0, 1))
    single = AnchorStore(alpha=ALPHA)
    upd(single, *HISTORY)
    upd(single, SHARDS[0][0] + SHARDS[1][0], SHARDS[0][1] + SHARDS[1][1])
    ref = single.state_dict()
    for key in ("user", "count", "n_obs"):
        assert torch.equal(g0[key], g1[key]) and torch.equal(g0[key], ref[key])
    for key in ("mean", "var"):
        assert torch.equal(g0[key], g1[key]) and torch.allclose(g0[key], ref[key], atol=1e-12)
    b0, b1 = (torch.load(tmp_path / f"broadcast{r}.pt") for r in (0, 1))
    assert all(torch.equal(b0[k], b1[k]) for k in ("user", "mean", "var", "count", "n_obs"))
    assert b1["user"].tolist() == [0, 1, 2, 3, 5]  # rank 0's extra user 5, not rank 1's user 6


def test_store_from_config_uses_anchor_alpha() -> None:
    from parpo.algorithms import AdvantageConfig

    assert AnchorStore.from_config(AdvantageConfig(anchor_alpha=0.05)).alpha == 0.05
