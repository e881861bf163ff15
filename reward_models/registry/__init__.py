"""Model registry: ``REG/<kind>/<version>/`` immutable versions, ``latest``/``production`` pointers.

```python
from reward_models.registry import Lineage, Registry, SplitRef

reg = Registry("registry")
with reg.stage("reward") as st:
    st.write_weights(model.state_dict())
    st.write_config(cfg)
    st.lineage = Lineage(data_fingerprint=ds.fingerprint, split=SplitRef(name="temporal", seed=0), seed=1)
    st.metrics = {"valid": {...}, "test": {...}}
    version = st.publish()          # first of its kind: also production

v = reg.open("reward")              # production, verified against manifest.json
tensors = v.load_weights()          # safetensors; torch is imported only here
```

Nothing here imports torch; ``reward_models.registry.weights`` does. See
``docs/registry.md``.
"""

from reward_models.registry.errors import RegistryError
from reward_models.registry.layout import KINDS, POINTERS
from reward_models.registry.lineage import Lineage, SplitRef, git_sha, package_version
from reward_models.registry.registry import Registry, open_version
from reward_models.registry.stage import Stage
from reward_models.registry.version import Version, VersionInfo

__all__ = [
    "KINDS",
    "POINTERS",
    "Lineage",
    "Registry",
    "RegistryError",
    "SplitRef",
    "Stage",
    "Version",
    "VersionInfo",
    "git_sha",
    "open_version",
    "package_version",
]
