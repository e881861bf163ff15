"""A reward version is evaluated on the split algorithm its lineage names; a lineage written
before the algorithm was recorded means algorithm 1 (rows), never silently the pair split."""

from __future__ import annotations

import json

import pytest

from parpo.env.source import EnvSource
from parpo_core.artefacts import Registry, SplitRef
from parpo_core.artefacts.layout import LINEAGE
from parpo_core.artefacts.stage import Stage
from reward_models.data import RewardData
from reward_models.pipeline import evaluate_version, train_and_publish
from tests.plugins.rewards import reward_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def legacy_reg(tiny_synth, tmp_path_factory):
    """REG with one version trained on the algorithm-1 split whose lineage.json has no
    ``algorithm`` (as every version published before it was recorded)."""
    root = tmp_path_factory.mktemp("legacy")
    write_json = Stage.write_json

    def without_algorithm(self, rel, obj):
        if rel == LINEAGE:
            obj = obj | {"split": {k: v for k, v in obj["split"].items() if k != "algorithm"}}
        return write_json(self, rel, obj)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Stage, "write_json", without_algorithm)
        out = train_and_publish(reward_config("split.algorithm=1"), tiny_synth, root / "REG", root / "run")
    assert out is not None
    return root / "REG"


def test_a_lineage_without_algorithm_means_rows():
    assert SplitRef.model_validate({"name": "intervened", "seed": 0, "positives": {}}).algorithm == 1
    assert SplitRef(name="intervened", algorithm=2).model_dump()["algorithm"] == 2


def test_a_legacy_version_is_evaluated_on_its_row_split(legacy_reg, tiny_synth):
    v = Registry(legacy_reg).open("reward")  # verified: the manifest covers the legacy lineage.json
    assert "algorithm" not in json.loads((v.path / LINEAGE).read_text())["split"]
    assert v.lineage.split.algorithm == 1
    _, result = evaluate_version(legacy_reg, tiny_synth)
    assert result["split_algorithm"] == 1
    # The same numbers as at publish time, where training and test used the algorithm-1 split ...
    published = json.loads((v.path / "metrics.json").read_text())
    assert result["test"] == pytest.approx(published["test"])
    # ... which is not the pair split: on this data their test sets differ.
    rows = RewardData.load(tiny_synth, "intervened", algorithm=1)
    pairs = RewardData.load(tiny_synth, "intervened", algorithm=2)
    assert rows.test.indices.size != pairs.test.indices.size
    assert EnvSource.load(tiny_synth, legacy_reg).split.meta["algorithm"] == 1


def test_a_new_version_records_the_pair_split(tiny_synth, tmp_path):
    out = train_and_publish(reward_config(), tiny_synth, tmp_path / "REG", tmp_path / "run")
    assert out is not None
    assert json.loads((out.version.path / LINEAGE).read_text())["split"]["algorithm"] == 2
    _, result = evaluate_version(tmp_path / "REG", tiny_synth)
    assert result["split_algorithm"] == 2 and result["test"] == pytest.approx(out.metrics["test"])
