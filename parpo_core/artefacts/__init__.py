"""Artefact registry: ``REG/<kind>/<version>/`` immutable versions of every registered kind,
``latest``/``production`` and named alias pointers, add-only evaluations.

```python
from parpo_core.artefacts import Lineage, Registry, SplitRef

reg = Registry("registry")
with reg.stage("reward") as st:
    st.write_weights(model.state_dict())
    st.write_config(cfg)
    st.lineage = Lineage(data_fingerprint=ds.fingerprint, split=SplitRef(name="temporal", seed=0), seed=1)
    st.metrics = {"valid": {...}, "test": {...}}
    version = st.publish()          # first of its kind: also production

v = reg.open("reward")              # production, verified against manifest.json
tensors = v.load_weights()          # safetensors; torch is imported only here
reg.set_alias("reward", "challenger", v.name)
```

Kinds are registered by the packages that own them (``reward_models`` registers
``reward``, ``parpo`` registers ``policy``; see ``kinds``). Nothing here imports
torch; ``parpo_core.artefacts.weights`` does. See ``docs/registry.md``.
"""

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.kinds import KINDS, KindSpec, metrics_json_section, register_kind
from parpo_core.artefacts.layout import RESERVED
from parpo_core.artefacts.lineage import Lineage, SplitRef, git_sha, package_version
from parpo_core.artefacts.registry import Registry
from parpo_core.artefacts.stage import Stage
from parpo_core.artefacts.version import Version, VersionInfo

__all__ = [
    "KINDS",
    "RESERVED",
    "KindSpec",
    "Lineage",
    "Registry",
    "RegistryError",
    "SplitRef",
    "Stage",
    "Version",
    "VersionInfo",
    "git_sha",
    "metrics_json_section",
    "package_version",
    "register_kind",
]
