"""Synthetic probe: how much interest signal the data leaves, and how much of it each model recovers.

Every score goes through the same harness as ``parpo reward eval`` (``reward_models.evaluate``):
``interest_spearman`` (per-user Spearman with the true interest on 200 random warm items),
``popularity_spearman`` (the same with log train popularity), ``conformity_spearman`` (with the true
c_u * pop_i) and ``uniform.ndcg@10`` (each user's uniformly exposed items ranked by the score).

Ladder (one JSON line each, ``"bench": "reward_synthetic_probe"``):

- ``oracle``: the true vectors (interest Spearman 1 by construction: checks id alignment);
- ``oracle_logit``: the noise-free click logit a s(u, i) + c_u pop_i (interest branch = a s,
  conformity branch = c_u pop_i): the best possible click score;
- ``probe_user_mean``: true item vectors, user = mean true vector of the user's train positives;
- ``probe_item_mean``: true user vectors, item = mean true vector of the item's train users;
- ``probe_item_attributes``: true user vectors, item = its category + attributes mapped linearly
  to v (map cross-fitted on the truth): how much taste the catalogue features carry;
- ``probe_attributes_user_mean``: those attribute vectors for items, user = mean over its train
  positives: a feature-based model's reach without any true user vector;
- ``item_knn``: no truth at all: a user's score of item i is the sum over its train positives j
  of cos(j, i) over train users (item-item cosine): a plain collaborative reference;
- ``mostpop``: train popularity;
- each trained preset (``--presets``) and seed: its ``interest``, ``click`` and (DICE)
  ``conformity`` branch, plus ``r2_*``: held-out R² of a linear map from the learned item
  (user) interest vectors to the true ones, by item train-popularity bucket.

``"bench": "reward_synthetic_signal"``: clicks per user, train positives per user and item, and
the share of click-logit variance due to interest, conformity and noise (``truth/impressions``).
``--curve``: per-epoch ``interest_spearman`` / ``uniform.ndcg@10`` / valid NDCG@10 of each preset,
early stopping off (``"bench": "reward_synthetic_curve"``).

    python benchmarks/reward_synthetic_probe.py --data data/synth --threads 1
    python benchmarks/reward_synthetic_probe.py --data data/synth --curve 60 --presets dice mf
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POP_BUCKETS = ((1, 1), (2, 3), (4, 9), (10, 10**9))  # item train positives, inclusive


def _interest_weight(root: Path) -> float:
    """The generator's ``a`` in ``a s(u, i)`` of the click logit (``truth/meta.json``)."""
    return float(json.loads((Path(root) / "truth" / "meta.json").read_text())["config"]["interest_weight"])


def _tensor(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def signal_stats(data: Any) -> dict[str, Any]:
    """What the default generator leaves to learn from (main logs and the split's train part)."""
    imp = pl.read_parquet(Path(data.root) / "truth" / "impressions.parquet")
    main = imp.filter(pl.col("split") == "main")
    a = _interest_weight(data.root)
    parts = {
        "interest": a * main["interest"].to_numpy(),
        "conformity": main["conformity"].to_numpy() * main["popularity"].to_numpy(),
        "noise": main["noise"].to_numpy(),
    }
    total = sum(np.var(v) for v in parts.values())
    clicks = main.filter(pl.col("click")).group_by("user_id").len()["len"].to_numpy()
    per_user = data.train.lengths()
    per_item = data.popularity
    warm = per_item[per_item > 0]
    return {
        "bench": "reward_synthetic_signal",
        "data": Path(data.root).name,
        "split": data.split,
        "split_seed": data.seed,
        "clicks_per_user.mean": round(float(clicks.mean()), 2),
        "clicks_per_user.median": float(np.median(clicks)),
        "train_pos_per_user.mean": round(float(per_user[per_user > 0].mean()), 2),
        "train_pos_per_user.median": float(np.median(per_user[per_user > 0])),
        "warm_items": int(warm.size),
        "n_items": int(data.n_items),
        "train_pos_per_warm_item.median": float(np.median(warm)),
        "warm_items_with_1_pos": round(float((warm == 1).mean()), 3),
        "warm_items_with_le3_pos": round(float((warm <= 3).mean()), 3),
        "items_never_shown": int(data.n_items - main["item_id"].n_unique()),
        # variance of each additive piece of the click logit over shown (user, item) pairs
        **{f"logit_var_share.{k}": round(float(np.var(v) / total), 3) for k, v in parts.items()},
        "logit_corr.interest_conformity": round(
            float(np.corrcoef(parts["interest"], parts["conformity"])[0, 1]), 3
        ),
    }


def linear_r2(learned: np.ndarray, true: np.ndarray, groups: np.ndarray, seed: int = 0) -> dict[str, float]:
    """Held-out R² of a least-squares linear map from learned [n, k] to true [n, d] vectors, overall
    and per group (a label per row; -1 rows ignored): how much of the true vectors the learned ones
    carry. The learned vectors are cut to their top d principal components first (as many as the
    truth has), so the two-fold fit does not overfit k + 1 coefficients on a few hundred rows."""
    keep = groups >= 0
    z = learned[keep] - learned[keep].mean(0)
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    x = np.c_[z @ vt[: true.shape[1]].T, np.ones(z.shape[0])]
    y, g = true[keep], groups[keep]
    fold = np.random.default_rng(seed).random(x.shape[0]) < 0.5
    pred = np.empty_like(y)
    for f in (True, False):
        w, *_ = np.linalg.lstsq(x[fold != f], y[fold != f], rcond=None)
        pred[fold == f] = x[fold == f] @ w
    ss_tot = ((y - y.mean(0)) ** 2).sum(1)
    ss_res = ((y - pred) ** 2).sum(1)
    out = {"all": float(1.0 - ss_res.sum() / ss_tot.sum())}
    out |= {str(int(b)): float(1.0 - ss_res[g == b].sum() / ss_tot[g == b].sum()) for b in np.unique(g)}
    return out


def pop_bucket(pop: np.ndarray) -> np.ndarray:
    b = np.full(pop.shape, -1)
    for k, (lo, hi) in enumerate(POP_BUCKETS):
        b[(pop >= lo) & (pop <= hi)] = k
    return b


def measure(
    name: str, vec: Any, branch: str, data: Any, t: Any, uniform: Any, **extra: Any
) -> dict[str, Any]:
    """One ladder row: the branch's score through the evaluation harness."""
    from data_pipelines.metrics import mean_user_spearman
    from reward_models.evaluate import uniform_metrics

    s = vec.pair_scores(t.users, t.items, branch)
    logpop = np.log1p(data.popularity.astype(np.float64))[t.items]
    row: dict[str, Any] = {
        "bench": "reward_synthetic_probe",
        "data": Path(data.root).name,
        "split_seed": data.seed,
        "score": name,
        "branch": branch,
        **extra,
        "interest_spearman": round(mean_user_spearman(s, t.interest)[0], 4),
        "popularity_spearman": round(mean_user_spearman(s, logpop)[0], 4),
        "conformity_spearman": round(mean_user_spearman(s, t.conformity)[0], 4),
    }
    u = uniform_metrics(vec.pair_scorer(branch), data, uniform)
    row |= {k: round(v, 4) for k, v in u.items() if k in ("uniform.ndcg@10", "uniform.recall@10")}
    return row


def probe_vectors(data: Any, t: Any) -> dict[str, Any]:
    """The truth-based and truth-free reference scorers as ``Vectors``."""
    from data_pipelines.synth import Truth
    from reward_models.evaluate import Vectors

    f = _tensor
    d = t.user_vectors.shape[1]
    tu, ti = t.user_vectors / np.sqrt(d), t.item_vectors
    a = _interest_weight(data.root)
    c_u = Truth(data.root).conformity(data.users["id"].to_numpy())
    r = data.train
    rows, cols = r.row_ids(), r.indices
    deg_u = np.maximum(r.lengths(), 1)[:, None]
    user_mean = np.zeros_like(tu)
    np.add.at(user_mean, rows, ti[cols])
    user_mean /= deg_u
    deg_i = np.maximum(data.popularity, 1)[:, None]
    item_mean = np.zeros_like(ti)
    np.add.at(item_mean, cols, t.user_vectors[rows])
    item_mean /= deg_i
    # item-kNN: X [users, items] binary; item-item cosine; user score = sum over its positives
    x = np.zeros((data.n_users, data.n_items), dtype=np.float32)
    x[rows, cols] = 1.0
    xn = x / np.sqrt(np.maximum(x.sum(0, keepdims=True), 1.0))
    attr = attribute_vectors(data, ti)
    user_attr = np.zeros_like(tu)
    np.add.at(user_attr, rows, attr[cols])
    user_attr /= deg_u
    return {
        "oracle": Vectors({"interest": f(tu)}, {"interest": f(ti)}),
        "oracle_logit": Vectors(
            {"interest": f(a * tu), "conformity": f(c_u[:, None])},
            {"interest": f(ti), "conformity": f(t.pop[:, None])},
        ),
        "probe_user_mean": Vectors({"interest": f(user_mean)}, {"interest": f(ti)}),
        "probe_item_mean": Vectors({"interest": f(tu)}, {"interest": f(item_mean)}),
        "probe_item_attributes": Vectors({"interest": f(tu)}, {"interest": f(attr)}),
        "probe_attributes_user_mean": Vectors({"interest": f(user_attr)}, {"interest": f(attr)}),
        # user row of X times item-item cosine: <x_u, S_:i> = x_u Xn^T Xn[:, i]
        "item_knn": Vectors({"interest": f(x @ xn.T @ xn)}, {"interest": f(np.eye(data.n_items))}),
        **ease(data, x),
        "mostpop": Vectors(
            {"interest": f(np.ones((data.n_users, 1)))}, {"interest": f(data.popularity[:, None])}
        ),
    }


def attribute_vectors(data: Any, true_items: np.ndarray, seed: int = 0) -> np.ndarray:
    """Item vectors predicted from the observable catalogue (category + attributes, one-hot) by a
    least-squares map to the true vectors, two-fold cross-fitted (each item predicted by a map fitted
    on the other half). Measures how much of v_i the features carry: what a feature-based item
    encoder (stage 1) could at best add for items with few interactions."""
    cat = pl.read_parquet(Path(data.root) / "items.parquet", columns=["item_id", "category", "attributes"])
    cat = data.items.join(cat, left_on="id", right_on="item_id", how="left").sort("index")
    names = sorted(set(cat["category"].to_list()) | {a for row in cat["attributes"].to_list() for a in row})
    col = {n: k for k, n in enumerate(names)}
    x = np.zeros((data.n_items, len(names) + 1))
    x[:, -1] = 1.0
    for r, (c, attrs) in enumerate(zip(cat["category"].to_list(), cat["attributes"].to_list(), strict=True)):
        x[r, [col[c], *(col[a] for a in attrs)]] = 1.0
    fold = np.random.default_rng(seed).random(data.n_items) < 0.5
    pred = np.empty_like(true_items)
    for f in (True, False):
        w, *_ = np.linalg.lstsq(x[fold != f], true_items[fold != f], rcond=None)
        pred[fold == f] = x[fold == f] @ w
    return pred


def ease(data: Any, x: np.ndarray, lambdas: tuple[float, ...] = (1.0, 10.0, 50.0, 200.0, 1000.0)) -> dict:
    """EASE (Steck, WWW 2019): closed-form item-item model, B = I - P / diag(P), P = (X^T X + lam I)^-1;
    lam chosen on valid NDCG@10 only. A strong id-only reference for sparse positive-only data."""
    from reward_models.evaluate import Vectors, ranking

    gram = x.T.astype(np.float64) @ x
    best: tuple[float, float, np.ndarray] | None = None
    for lam in lambdas:
        p = np.linalg.inv(gram + lam * np.eye(gram.shape[0]))
        b = -p / np.diag(p)[None, :]
        np.fill_diagonal(b, 0.0)
        user = (x @ b).astype(np.float32)
        ndcg = ranking(lambda u, user=user: user[u], data, "valid", [10])["ndcg@10"]
        if best is None or ndcg > best[0]:
            best = (ndcg, lam, user)
    assert best is not None
    line = {"bench": "reward_synthetic_ease", "lambda": best[1], "valid.ndcg@10": round(best[0], 4)}
    print(json.dumps(line), flush=True)
    return {"ease": Vectors({"interest": _tensor(best[2])}, {"interest": _tensor(np.eye(data.n_items))})}


def impression_als(
    data: Any,
    true_users: np.ndarray,
    dim: int = 16,
    lambdas: tuple[float, ...] = (1.0, 5.0, 20.0),
    iters: int = 15,
) -> tuple[dict, dict]:
    """Exposure-aware id-only reference: ridge ALS on every main-log impression, target the click
    (0/1, centred), so shown-but-not-clicked items are the negatives instead of uniform ones.
    lam chosen on the squared error of 10% held-out impressions. Uses the whole main log (more than
    the split's train part), so it bounds what the logs hold, not what a split-trained model sees.
    ``probe_item_impressions``: the item half-step alone with the true user vectors ``true_users``
    (what the impressions tell about an item when every user's taste is known)."""
    from reward_models.data import index_pairs
    from reward_models.evaluate import Vectors

    imp = pl.read_parquet(Path(data.root) / "truth" / "impressions.parquet").filter(pl.col("split") == "main")
    imp = index_pairs(
        imp.select("user_id", "item_id", pl.col("click").cast(pl.Float64)), data.users, data.items
    )
    u, i, y = imp["u"].to_numpy(), imp["i"].to_numpy(), imp["click"].to_numpy()
    rng = np.random.default_rng(0)
    held = rng.random(u.size) < 0.1
    y = y - y[~held].mean()

    def solve(rows: np.ndarray, cols: np.ndarray, target: np.ndarray, other: np.ndarray, n: int, lam: float):
        out = np.zeros((n, other.shape[1]))
        order = np.argsort(rows, kind="stable")
        bounds = np.searchsorted(rows[order], np.arange(n + 1))
        eye = lam * np.eye(other.shape[1])
        for r in range(n):
            sl = order[bounds[r] : bounds[r + 1]]
            if sl.size:
                o = other[cols[sl]]
                out[r] = np.linalg.solve(o.T @ o + eye, o.T @ target[sl])
        return out

    best: tuple[float, float, np.ndarray, np.ndarray] | None = None
    for lam in lambdas:
        pu = rng.normal(0, 0.1, (data.n_users, dim))
        qi = rng.normal(0, 0.1, (data.n_items, dim))
        tr = ~held
        for _ in range(iters):
            pu = solve(u[tr], i[tr], y[tr], qi, data.n_users, lam)
            qi = solve(i[tr], u[tr], y[tr], pu, data.n_items, lam)
        err = float(np.mean((y[held] - (pu[u[held]] * qi[i[held]]).sum(1)) ** 2))
        if best is None or err < best[0]:
            best = (err, lam, pu, qi)
    assert best is not None
    f = _tensor
    info = {"lambda": best[1], "held_out_mse": round(best[0], 5), "dim": dim}
    qi_true = solve(i, u, y, true_users, data.n_items, best[1])
    return {
        "impression_als": Vectors({"interest": f(best[2])}, {"interest": f(best[3])}),
        "probe_item_impressions": Vectors({"interest": f(true_users)}, {"interest": f(qi_true)}),
    }, info


def train(preset: str, data: Any, seed: int, extra: list[str], curve: int) -> tuple[Any, dict, list[dict]]:
    """Train ``preset``; with ``curve`` > 0, ``curve`` epochs without early stopping and the
    per-epoch truth metrics. Returns (readout Vectors, training summary, curve rows)."""
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.pipeline import export_weights, readout_vectors
    from reward_models.training import fit

    over = [
        f"split.name={data.split}",
        f"split.seed={data.seed}",
        f"runtime.seed={seed}",
        "train.progress_bar=false",
        "train.checkpoint=false",
        *extra,
    ]
    if curve:
        over += [f"train.epochs={curve}", "train.early_stopping=false", "train.restore_best=false"]
    cfg = load(RewardConfig, "reward", preset, over)
    with tempfile.TemporaryDirectory(prefix="reward-probe-") as run:
        if curve:
            res, rows = _fit_with_curve(cfg, data, Path(run))
        else:
            res, rows = fit(cfg, data, run), []
    return readout_vectors(export_weights(res.tables, data), data), res.summary(), rows


def _fit_with_curve(cfg: Any, data: Any, run: Path) -> tuple[Any, list[dict]]:
    """``fit`` with one extra callback measuring the truth metrics after every validation."""
    import pytorch_lightning as pl

    from reward_models.evaluate import Vectors, truth_spearman

    rows: dict[int, dict] = {}

    class Curve(pl.Callback):
        def on_validation_end(self, trainer: pl.Trainer, module: Any) -> None:
            vec = Vectors.from_tables(module.model.export())
            row = rows.setdefault(trainer.current_epoch, {"epoch": trainer.current_epoch})
            row["valid.ndcg@10"] = round(float(trainer.callback_metrics["valid/ndcg@10"]), 4)
            row["interest_spearman"] = round(truth_spearman(vec, data)["interest_spearman"], 4)

        def on_train_epoch_end(self, trainer: pl.Trainer, module: Any) -> None:
            row = rows.setdefault(trainer.current_epoch, {"epoch": trainer.current_epoch})
            # callbacks run before the module's hook that logs train/loss: read its running sums
            row["loss"] = round(float(module._epoch_loss["loss"]) / max(module._epoch_steps, 1), 5)

    fit_mod = importlib.import_module("reward_models.training.fit")
    make = fit_mod.make_trainer
    fit_mod.make_trainer = lambda c, d, cbs, *rest: make(c, d, [*cbs, Curve()], *rest)
    try:
        res = fit_mod.fit(cfg, data, run)
    finally:
        fit_mod.make_trainer = make
    return res, [rows[k] for k in sorted(rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a dataset written by `parpo data synth`")
    ap.add_argument("--split", default="intervened")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--presets", nargs="*", default=["dice", "mf"])
    ap.add_argument("--curve", type=int, default=0, help="epochs of the per-epoch curve (0: off)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--no-reference", action="store_true", help="skip the data statistics and reference ladder"
    )
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every trained preset")
    args = ap.parse_args()

    import torch

    from data_pipelines.dataset import Dataset
    from reward_models.data import RewardData
    from reward_models.evaluate import truth_sample

    torch.set_num_threads(args.threads)
    data = RewardData.load(args.data, args.split, args.split_seed)
    t = truth_sample(data)
    if t is None:
        sys.exit(f"error: {args.data}: no truth/ (not a synthetic dataset) or no warm users")
    uniform = Dataset(Path(args.data) / "uniform_test")
    if not args.no_reference:
        print(json.dumps(signal_stats(data)), flush=True)
        als, als_info = impression_als(data, t.user_vectors)
        print(json.dumps({"bench": "reward_synthetic_als", **als_info}), flush=True)
        for name, vec in (probe_vectors(data, t) | als).items():
            for branch in ("interest", "conformity", "click") if vec.disentangled else ("interest",):
                print(json.dumps(measure(name, vec, branch, data, t, uniform)), flush=True)
    warm_items = data.popularity > 0
    buckets = pop_bucket(data.popularity)
    for preset in args.presets:
        for seed in args.seeds:
            print(f"{preset} seed={seed} ...", file=sys.stderr, flush=True)
            vec, summary, curve = train(preset, data, seed, args.overrides, args.curve)
            for row in curve:
                print(json.dumps({"bench": "reward_synthetic_curve", "model": preset, "seed": seed, **row}))
            iv = vec.item["interest"].numpy()
            uv = vec.user["interest"].numpy()
            r2_item = linear_r2(iv[warm_items], t.item_vectors[warm_items], buckets[warm_items], seed)
            seen = data.seen_users()
            r2_user = linear_r2(uv[seen], t.user_vectors[seen], np.zeros(int(seen.sum()), dtype=int), seed)
            info = {
                "model": preset,
                "seed": seed,
                "overrides": args.overrides,
                "best_epoch": summary["best_epoch"],
                "epochs": summary["epochs"],
                "r2_item_interest": {k: round(v, 3) for k, v in r2_item.items()},
                "r2_user_interest": round(r2_user["all"], 3),
            }
            branches = ("interest", "conformity", "click") if vec.disentangled else ("interest",)
            for branch in branches:
                print(json.dumps(measure(preset, vec, branch, data, t, uniform, **info)), flush=True)


if __name__ == "__main__":
    main()
