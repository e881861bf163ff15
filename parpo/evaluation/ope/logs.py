"""Logged bandit feedback read from a canonical dataset (``data_pipelines.dataset.Dataset``).

Rows are the ``impression`` events with a propensity and a position (the server's decision
logs and OBD both land there). The reward is the impression's own ``value`` (OBD: the click)
or, with ``reward_event``, whether feedback of that kind names the same request, position and
item (the server's logs: a ``click`` answers an impression). The action set of a slice is
every item of the chosen category in the items table, so items never logged still get
evaluated-policy mass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parpo.evaluation.ope.feedback import LoggedFeedback
from parpo_core.errors import DataError


@dataclass(frozen=True)
class Logs:
    """One slice of logs, pi_e not yet attached. ``items``: action index -> item_id;
    ``request_ids``/``user_ids``: each row's request (the slate it was shown in) and user."""

    items: list[str]
    request_ids: list[str | None]
    user_ids: list[str | None]
    context: np.ndarray
    action: np.ndarray
    position: np.ndarray  # 0-based
    reward: np.ndarray
    pscore: np.ndarray

    @property
    def n_positions(self) -> int:
        return int(self.position.max()) + 1 if self.position.size else 0

    def feedback(self, pi_e: np.ndarray) -> LoggedFeedback:
        """Attach a context-free evaluated policy, ``pi_e`` [P, A] (row p: its distribution over
        ``items`` at position p). Context-dependent policies build ``LoggedFeedback`` directly."""
        if pi_e.shape != (self.n_positions, len(self.items)):
            raise ValueError(f"pi_e has shape {pi_e.shape}, expected ({self.n_positions}, {len(self.items)})")
        return LoggedFeedback(
            self.context, self.action, self.position, self.reward, self.pscore, pi_e[self.position]
        )


def read_logs(
    root: str | Path,
    logging_policy: str | Sequence[str],
    category: str | None = None,
    context_features: Sequence[str] | None = None,
    reward_event: str | None = None,
) -> Logs:
    """Impressions logged by ``logging_policy`` (one name or several: each row keeps its own
    logger's propensity) on items of ``category`` (None: all items).

    The context is the user when there is one, else the request's ``context_features`` (feature
    keys of the contexts table that describe who was shown the slate, e.g. OBD's
    ``user_feature_0..3``); with neither, every row is its own context.
    """
    import polars as pl

    from data_pipelines.dataset import Dataset

    ds = Dataset(root)
    loggers = [logging_policy] if isinstance(logging_policy, str) else list(logging_policy)
    items = ds.items().select("item_id", "category")
    if category is not None:
        items = items.filter(pl.col("category") == category)
    rows = (
        ds.interactions()
        .filter(
            (pl.col("event") == "impression")
            & pl.col("logging_policy").is_in(loggers)
            & pl.col("propensity").is_not_null()
            & pl.col("position").is_not_null()
        )
        .select("user_id", "request_id", "item_id", "position", "value", "propensity")
        .collect()
        .join(items, on="item_id", how="semi")
    )
    if rows.height == 0:
        policies = ds.interactions().select(pl.col("logging_policy").unique()).collect().to_series().to_list()
        where = f" on category {category!r}" if category else ""
        raise DataError(
            f"{ds.root}: no impressions logged by {' or '.join(map(repr, loggers))}{where} (logging "
            f"policies here: {', '.join(sorted(p for p in policies if p)) or 'none'})"
        )
    if reward_event is not None:
        answered = (
            ds.interactions()
            .filter(pl.col("event") == reward_event)
            .select("request_id", "position", "item_id", pl.lit(1.0).alias("__r"))
            .unique()
            .collect()
        )
        if answered.height == 0:
            kinds = ds.interactions().select(pl.col("event").unique()).collect().to_series().to_list()
            raise DataError(
                f"{ds.root}: no {reward_event!r} events to use as the reward (events here: "
                f"{', '.join(sorted(kinds))})"
            )
        rows = rows.join(answered, on=["request_id", "position", "item_id"], how="left").with_columns(
            pl.col("__r").fill_null(0.0).alias("value")
        )
    key = pl.col("user_id")
    if context_features:
        wanted = list(context_features)
        ctx = ds.contexts().select(
            "request_id",
            pl.col("features")
            .list.eval(
                pl.element().filter(pl.element().struct.field("key").is_in(wanted)).struct.field("value")
            )
            .list.join("|")
            .alias("__ctx"),
        )
        rows = rows.join(ctx, on="request_id", how="left")
        key = pl.coalesce(key, pl.col("__ctx"))
    rows = rows.with_columns(pl.coalesce(key, pl.col("request_id")).alias("__ctx"))
    item_ids = sorted(items["item_id"].to_list())
    index = {item: i for i, item in enumerate(item_ids)}
    return Logs(
        items=item_ids,
        request_ids=rows["request_id"].to_list(),
        user_ids=rows["user_id"].to_list(),
        context=rows["__ctx"].rank("dense").to_numpy().astype(np.int64) - 1,
        action=np.array([index[i] for i in rows["item_id"].to_list()], dtype=np.int64),
        position=rows["position"].to_numpy().astype(np.int64) - 1,
        reward=rows["value"].to_numpy().astype(np.float64),
        pscore=rows["propensity"].to_numpy().astype(np.float64),
    )
