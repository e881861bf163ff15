"""``NameRegistry``: register, refuse duplicates, a one-line miss with the closest name."""

from __future__ import annotations

import pytest

from parpo_core.errors import UserError
from parpo_core.names import NameRegistry, UnknownName


def test_register_adds_and_refuses_duplicates() -> None:
    reg: NameRegistry = NameRegistry("thing")

    @reg.register("alpha")
    def alpha() -> int:
        return 1

    reg.add("beta", 2)
    assert reg["alpha"] is alpha and reg["beta"] == 2 and reg.get("gamma") is None
    assert reg.names() == ["alpha", "beta"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("alpha")(alpha)
    with pytest.raises(ValueError, match="thing 'beta' is already registered"):
        reg.add("beta", 3)


def test_a_miss_is_one_user_error_line_naming_the_closest_name() -> None:
    reg: NameRegistry = NameRegistry("split")
    reg.add("temporal", 1)
    reg.add("intervened", 2)
    with pytest.raises(UnknownName) as info:
        reg["tmporal"]
    err = info.value
    assert isinstance(err, UserError) and isinstance(err, KeyError)
    assert str(err) == "unknown split 'tmporal' (did you mean 'temporal'?); known: intervened, temporal"
    with pytest.raises(UnknownName, match=r"^unknown split 'x'; known: intervened, temporal$"):
        reg["x"]


def test_every_name_table_is_a_name_registry() -> None:
    from data_pipelines.adapters import ADAPTERS
    from data_pipelines.splits.registry import SPLITS
    from parpo.algorithms import ADVANTAGES, AGGREGATIONS, KL, LOSSES
    from parpo.evaluation.ope import ESTIMATORS
    from parpo_core.artefacts import KINDS
    from reward_models.losses import DISCREPANCIES

    tables = (ADAPTERS, SPLITS, ADVANTAGES, AGGREGATIONS, KL, LOSSES, ESTIMATORS, KINDS, DISCREPANCIES)
    assert all(isinstance(t, NameRegistry) and len(t) > 0 for t in tables)
    assert "parpo-events" in ADAPTERS and {"reward", "policy"} <= set(KINDS)
