from pathlib import Path

import numpy as np
import pytest

from data_pipelines.adapters import open_source
from data_pipelines.ingest import ingest
from parpo.evaluation.ope.logs import read_logs
from parpo_core.errors import DataError

CSV = """user_id,item_id,ts,event,value,category,request_id,position,propensity,logging_policy
u1,a,1600000000,impression,1,shoes,r1,1,0.5,uniform_random
u1,b,1600000001,impression,0,shoes,r1,2,0.5,uniform_random
u2,b,1600000002,impression,1,shoes,r2,1,0.5,uniform_random
u2,c,1600000003,impression,0,hats,r2,2,0.5,uniform_random
u3,a,1600000004,impression,0,shoes,r3,1,0.25,other
u3,a,1600000005,click,1,shoes,r3,,,
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    (root / "logs.csv").write_text(CSV)
    ingest(open_source("canonical", root / "logs.csv"), root / "ds")
    return root / "ds"


def test_reads_impressions_of_one_policy_and_category(dataset):
    logs = read_logs(dataset, "uniform_random", "shoes")
    assert logs.items == ["a", "b"]
    got = {  # a set: the rows' order is not part of the contract
        (logs.items[a], int(p), float(r), float(s), int(c))
        for a, p, r, s, c in zip(
            logs.action, logs.position, logs.reward, logs.pscore, logs.context, strict=True
        )
    }
    assert got == {("a", 0, 1.0, 0.5, 0), ("b", 1, 0.0, 0.5, 0), ("b", 0, 1.0, 0.5, 1)}  # context = user
    assert logs.n_positions == 2


def test_feedback_takes_pi_e_per_position(dataset):
    logs = read_logs(dataset, "uniform_random")  # all three items
    pi = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])  # [P, A]
    fb = logs.feedback(pi)
    assert fb.pi_e.shape == (4, 3)
    assert np.array_equal(fb.pi_e, pi[logs.position])
    with pytest.raises(ValueError, match="expected \\(2, 3\\)"):
        logs.feedback(pi[:, :2])


def test_missing_policy_is_a_readable_error(dataset):
    with pytest.raises(DataError, match="no impressions logged by 'obd_bts'.*other, uniform_random"):
        read_logs(dataset, "obd_bts")
