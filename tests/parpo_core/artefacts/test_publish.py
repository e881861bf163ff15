"""Publishing: files, manifest, pointers, names in publish order, lineage and metrics."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from parpo_core.artefacts import Lineage, Registry, RegistryError
from parpo_core.artefacts.manifest import sha256_file
from tests.plugins.artefacts import FP, lineage, publish


def test_publish_writes_files_manifest_and_pointers(reg: Registry, tmp_path):
    idmaps = tmp_path / "maps"
    idmaps.mkdir()
    (idmaps / "users.parquet").write_bytes(b"users")
    (idmaps / "items.parquet").write_bytes(b"items")
    logs = tmp_path / "train.csv"
    logs.write_text("step,loss\n1,0.5\n")
    catalogue = tmp_path / "cat"
    (catalogue / "part").mkdir(parents=True)
    (catalogue / "part" / "items.parquet").write_bytes(b"catalogue")
    (catalogue / ".DS_Store").write_bytes(b"junk")  # hidden files are not copied
    v = publish(
        reg,
        idmaps=idmaps,
        logs=logs,
        files={"catalogue": catalogue, "popularity.json": b"{}", "weights/blob.bin": b"w"},
    )

    assert v.path.parent == reg.root / "reward"
    on_disk = sorted(p.relative_to(v.path).as_posix() for p in v.path.rglob("*") if p.is_file())
    expected = [
        "catalogue/part/items.parquet",
        "config.yaml",
        "idmaps/items.parquet",
        "idmaps/users.parquet",
        "lineage.json",
        "logs/metrics.csv",
        "metadata.json",
        "metrics.json",
        "popularity.json",
        "weights/blob.bin",
    ]
    assert on_disk == sorted([*expected, "manifest.json"])
    assert (v.path / "evals").is_dir()
    m = json.loads((v.path / "manifest.json").read_text())
    assert (m["kind"], m["version"], m["schema_version"]) == ("reward", v.name, 1)
    assert sorted(m["files"]) == expected  # everything but manifest.json (and evals/)
    for rel, entry in m["files"].items():
        assert entry == {"sha256": sha256_file(v.path / rel), "size": (v.path / rel).stat().st_size}

    for ptr in ("latest", "production"):
        obj = json.loads((reg.root / "reward" / f"{ptr}.json").read_text())
        assert (obj["version"], obj["previous"], obj["pointer"]) == (v.name, [], ptr)
    assert v.config == {"model": "mf", "dim": 8, "tag": "x"}
    assert v.metadata == {"n_users": 3, "n_items": 5}
    assert (v.path / "logs" / "metrics.csv").read_text() == "step,loss\n1,0.5\n"
    # Published files are read-only; the folder is not (evals/ are added later).
    assert not (v.path / "config.yaml").stat().st_mode & stat.S_IWUSR


def test_first_publish_is_production_later_ones_only_latest(reg: Registry):
    v1 = publish(reg, tag="a")
    v2 = publish(reg, tag="b")
    assert reg.pointer("reward", "production")["version"] == v1.name
    latest = reg.pointer("reward", "latest")
    assert latest["version"] == v2.name and latest["previous"] == [v1.name]
    assert reg.open("reward").name == v1.name  # reading defaults to production
    assert reg.open("reward", "latest").name == v2.name
    # kinds are independent: the first policy is production of its own kind
    p1 = publish(reg, kind="policy")
    assert reg.pointer("policy", "production")["version"] == p1.name
    assert reg.pointer("reward", "production")["version"] == v1.name


def test_version_names_sort_in_publish_order(reg: Registry):
    names = [publish(reg, tag=str(i)).name for i in range(12)]
    assert sorted(names) == names == reg.versions("reward")
    assert [n.split("-")[0] for n in names[:2]] == ["v000001", "v000002"]
    assert names[-1].startswith("v000012-")
    assert [i.name for i in reg.list_versions("reward")] == names


def test_lineage_is_recorded_and_parent_resolved(reg: Registry):
    v1 = publish(reg)
    v2 = publish(reg, lineage=lineage(parent="latest", extra={"note": "retrain"}))
    lin = v2.lineage
    assert lin.parent == v1.name  # aliases are stored as the full name
    assert lin.data_fingerprint == FP and lin.seed == 7
    assert lin.split.name == "temporal" and lin.split.positives == {"events": ["click", "purchase"]}
    assert lin.package_version and lin.extra == {"note": "retrain"}
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:
        assert lin.git_sha == head.stdout.strip()
    with pytest.raises(RegistryError, match="no version 'v000009'"):
        publish(reg, lineage=lineage(parent="v000009"))
    assert len(reg.versions("reward")) == 2


def test_lineage_accepts_a_positives_rule_model():
    from data_pipelines.splits.rule import PositivesRule

    lin = lineage(split={"name": "intervened", "seed": 3, "positives": PositivesRule(min_value=4)})
    assert lin.split.positives["min_value"] == 4


def test_metrics_json_is_for_the_training_split(reg: Registry):
    v = publish(
        reg,
        metrics={
            "valid": {"ndcg@10": 0.1},
            "test": {"ndcg@10": 0.2, "mrr@10": float("nan")},
            "synthetic": {},
        },
    )
    m = v.metrics
    assert list(m)[:4] == ["schema_version", "split", "seed", "data_fingerprint"]
    assert (m["schema_version"], m["split"], m["seed"], m["data_fingerprint"]) == (1, "temporal", 0, FP)
    assert m["test"] == {"ndcg@10": 0.2, "mrr@10": None}  # NaN is not JSON: stored as null
    with pytest.raises(RegistryError, match="split='cold_users' differs"):
        publish(reg, metrics={"split": "cold_users", "test": {}})


def test_stage_api_and_no_publish_discards(reg: Registry):
    with reg.stage("policy") as st:
        st.write_json("catalogue/meta.json", {"n": 2})
        st.write_yaml("config.yaml", {"a": 1})
        st.path("popularity/pop.bin").write_bytes(b"\x00\x01")
        st.lineage = lineage()
        v = st.publish()
    assert v.read_json("catalogue/meta.json") == {"n": 2}
    assert v.files("popularity/") == ["popularity/pop.bin"]
    assert v.metrics is None
    with reg.stage("policy") as st:
        st.write_text("x.txt", "never published")
    assert reg.versions("policy") == [v.name]
    assert [p.name for p in (reg.root / "policy").iterdir() if p.name.startswith(".staging")] == []


@pytest.mark.parametrize("rel", ["../x", "/abs", "evals/e.json", "manifest.json", ".hidden", ""])
def test_bad_paths_are_refused(reg: Registry, rel: str):
    with reg.stage("reward") as st, pytest.raises(RegistryError):
        st.write_bytes(rel, b"x")


def test_publish_needs_a_lineage_and_a_known_kind(reg: Registry):
    with reg.stage("reward") as st, pytest.raises(RegistryError, match="publish needs a lineage"):
        st.publish()
    with pytest.raises(RegistryError, match="unknown registry kind 'rewards'"):
        reg.stage("rewards")
    with reg.stage("reward") as st, pytest.raises(RegistryError, match="lineage: data_fingerprint"):
        st.lineage = {"split": {"name": "temporal"}}
        st.publish()
    assert reg.versions("reward") == []


def test_core_import_loads_no_torch(reg: Registry):
    publish(reg)
    code = (
        "import sys\n"
        "import reward_models  # registers the reward kind\n"
        "from parpo_core.artefacts import Registry\n"
        f"r = Registry({str(reg.root)!r})\n"
        "infos = r.list_versions('reward'); v = r.open('reward'); v.lineage; v.metrics; v.config\n"
        "print(len(infos), ','.join(m for m in ('torch', 'safetensors', 'polars') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_lineage_defaults_never_fail(tmp_path):
    from parpo_core.artefacts.lineage import git_sha

    assert git_sha(tmp_path) is None  # not a git checkout
    lin = Lineage(data_fingerprint="f", split={"name": "native"})
    assert lin.parent is None and lin.created.endswith("Z")


def test_one_call_publish_with_idmap_files_and_a_write_callback(reg: Registry, tmp_path):
    users = tmp_path / "u.parquet"
    users.write_bytes(b"u")
    v = reg.publish(
        "policy",
        lineage=lineage(),
        idmaps={"users": users, "items": str(users)},
        write=lambda st: st.write_json("popularity/meta.json", {"window_days": 30}),
    )
    assert v.files() == [
        "idmaps/items.parquet",
        "idmaps/users.parquet",
        "lineage.json",
        "popularity/meta.json",
    ]
