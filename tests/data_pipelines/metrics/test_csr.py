"""Per-user item sets: building CSR from pairs, frames, lists, scipy and masks; row gathering."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest
from scipy import sparse

from data_pipelines.metrics import Csr, as_csr, csr_from_frame, csr_from_lists, csr_from_pairs, csr_rows


def rows(c: Csr) -> list[list[int]]:
    return [c.row(u).tolist() for u in range(c.n_rows)]


def test_pairs_are_sorted_and_deduplicated():
    c = csr_from_pairs([2, 0, 2, 0, 2], [5, 3, 1, 3, 5], n_users=4)
    assert rows(c) == [[3], [], [1, 5], []]
    np.testing.assert_array_equal(c.indptr, [0, 1, 1, 3, 3])


def test_from_polars_frame():
    df = pl.DataFrame({"user_index": [1, 1, 0], "item_index": [4, 2, 7]})
    assert rows(csr_from_frame(df, n_users=3)) == [[7], [2, 4], []]
    other = df.rename({"user_index": "u", "item_index": "i"})
    assert rows(csr_from_frame(other, 2, user="u", item="i")) == [[7], [2, 4]]


def test_as_csr_reads_every_format_the_same():
    want = [[1, 3], [], [0]]
    mask = np.zeros((3, 4), dtype=bool)
    mask[0, [1, 3]] = mask[2, 0] = True
    unsorted = (np.array([0, 2, 2, 3]), np.array([3, 1, 0]))  # row 0 unsorted: sorted on the way in
    for x in (want, mask, sparse.csr_matrix(mask), sparse.coo_array(mask), unsorted, csr_from_lists(want)):
        assert rows(as_csr(x, 3)) == want
    assert rows(as_csr(np.array([[4, 2], [0, 1]]))) == [[2, 4], [0, 1]]  # 2-D int: items per row
    with pytest.raises(ValueError, match="expected item sets for 2 users"):
        as_csr(want, 2)
    with pytest.raises(ValueError, match="indptr"):
        as_csr((np.array([0, 5]), np.array([1])))


def test_pairs_are_checked():
    with pytest.raises(ValueError, match="user indices"):
        csr_from_pairs([3], [0], n_users=3)
    with pytest.raises(ValueError, match="same length"):
        csr_from_pairs([0, 1], [0], n_users=3)


def test_rows_gather_in_order_with_repeats():
    c = csr_from_lists([[1, 3], [], [0], [2, 4, 5]])
    assert rows(csr_rows(c, [3, 0, 3, 1])) == [[2, 4, 5], [1, 3], [2, 4, 5], []]
    assert csr_rows(c, []).n_rows == 0


def test_package_import_is_light():
    """The lowest layer: importing the metrics pulls in neither torch, polars nor scipy."""
    code = (
        "import sys, data_pipelines.metrics; "
        "heavy = {'torch', 'polars', 'scipy', 'pandas'} & {m.split('.')[0] for m in sys.modules}; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
