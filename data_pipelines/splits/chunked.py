"""Logs larger than memory: their rows cut into user ranges, split one range at a time.

Every history protocol decides each user's rows from that user's rows alone, plus the
item counts over all users that ``intervened`` weighs by (``unit_counts``, which add up
over disjoint users). So ``data_pipelines.splits.store`` writes a split of a log with more
than ``CHUNK_ROWS`` rows range by range: ``user_ranges`` cuts the sorted user ids into
ranges of about ``chunk_rows`` rows, ``spill`` writes each range's rows to its own file in
one pass over the data, and each part is appended range after range, so parts come out
in user order, as one cut would write them. Memory then follows the range, not the log.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from data_pipelines.dataset import Dataset
from data_pipelines.splits.prepare import COLUMNS

#: Rows above which splits are cut by user range (a range holds about this many rows).
CHUNK_ROWS = 8_000_000

#: Rows per batch of the spill's pass over the data.
SPILL_BATCH = 1 << 20


def n_rows(dataset: Dataset) -> int:
    """Interaction rows of ``dataset``, from the partitions' parquet footers."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in dataset.partition_paths())


def user_ranges(dataset: Dataset, chunk_rows: int = CHUNK_ROWS) -> pl.Series | None:
    """The first user id of every range but the first, sorted (a String series), so that each
    range holds about ``chunk_rows`` rows (at least one user); None when one range would hold
    every row. Anonymous rows (no user) belong to the last range."""
    if n_rows(dataset) <= chunk_rows:
        return None
    per_user = (
        dataset.interactions()
        .filter(pl.col("user_id").is_not_null())
        .group_by("user_id")
        .agg(pl.len().alias("n"))
        .collect(engine="streaming")
        .sort("user_id")
    )
    n = per_user.get_column("n")
    rng = (n.cum_sum() - n) // chunk_rows  # each user's range: by the rows before it
    first = rng != rng.shift(1, fill_value=0)
    return per_user.get_column("user_id").filter(first)


def spill(dataset: Dataset, bounds: pl.Series, folder: Path) -> list[Path]:
    """Write each range's rows (every canonical column, and ``__row``: the row's place in
    ``Dataset.interactions`` order) to ``folder/range-<k>.parquet``, in one pass over the
    data. Returns the files in range order (a range without rows has none)."""
    last = len(bounds)
    writers: dict[int, pq.ParquetWriter] = {}
    offset = 0
    try:
        for path in dataset.partition_paths():
            for batch in pq.ParquetFile(path).iter_batches(batch_size=SPILL_BATCH, columns=COLUMNS):
                df = pl.from_arrow(batch).with_columns(
                    pl.int_range(offset, offset + batch.num_rows, dtype=pl.get_index_type()).alias("__row")
                )
                offset += batch.num_rows
                users = df.get_column("user_id")
                rng = np.where(
                    users.is_null().to_numpy(), last, bounds.search_sorted(users, side="right").to_numpy()
                )
                for k in np.unique(rng):
                    table = df.filter(pl.Series(rng == k)).to_arrow()
                    if k not in writers:
                        writers[k] = pq.ParquetWriter(folder / f"range-{k}.parquet", table.schema)
                    writers[k].write_table(table)
    finally:
        for w in writers.values():
            w.close()
    return [folder / f"range-{k}.parquet" for k in sorted(writers)]
