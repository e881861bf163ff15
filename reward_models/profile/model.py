"""Stage 1 as one object: the encoder, the profile -> user map, the attributes -> item map.

    z_u      = encoder(views(profile_u))                                    [D]
    m_u      = mean of the stage-2 vectors of the profile's warm items      [nb * d]
    u_hat    = mean warm u + g([z_u, m_u, 1{profile has warm items}])       [nb * d]  (interest | conformity)
    i_hat    = mean warm i + h([category one-hot, attributes, log price, priced])   [nb * d]

``g`` and ``h`` are two-layer MLPs fitted on warm users / warm items
(``reward_models.profile.fit``). ``tensors`` / ``from_tensors`` round-trip everything
through the flat safetensors dict of the registry version (keys under ``stage1.``);
``meta`` is the JSON half (the ``ViewSpec`` and sizes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from reward_models.profile.encoder import ProfileEncoder, mlp
from reward_models.profile.spec import ItemSide, ViewSpec
from reward_models.profile.views import ProfileLog, build_views

PREFIX = "stage1."


class ProfileModel(nn.Module):
    """See the module docstring. ``branch_dim``: d of each stage-2 branch; ``branches``: their names."""

    def __init__(
        self,
        spec: ViewSpec,
        side: ItemSide,
        popularity: Tensor,
        user_features: Tensor,
        *,
        dim: int,
        hidden: int,
        map_hidden: int,
        branches: Sequence[str],
        branch_dim: int,
    ) -> None:
        super().__init__()
        self.spec, self.side, self.branches, self.branch_dim = spec, side, tuple(branches), branch_dim
        self.popularity = popularity.double()  # [n_items] train counts
        self.user_features = user_features.float()  # [n_users, F]: the id map's users
        self.sizes = {"dim": dim, "hidden": hidden, "map_hidden": map_hidden}
        self.encoder = ProfileEncoder(spec.dims(), dim, hidden)
        out = len(self.branches) * branch_dim
        self.user_map = mlp(dim + out + 1, map_hidden, out)
        self.item_map = mlp(len(spec.categories) + len(spec.attributes) + 2, map_hidden, out)
        # The maps predict offsets from the mean warm user / item (the stage-2 fallbacks), so an
        # uninformative profile lands on the fallback, not on an arbitrary point.
        self.register_buffer("user_mean", torch.zeros(out))
        self.register_buffer("item_mean", torch.zeros(out))

    def encode(self, log: ProfileLog, features: Tensor | None) -> tuple[Tensor, Tensor]:
        """z [U, dim] and attention weights [U, V] of ``log``'s users."""
        views, mask = build_views(self.spec, log, self.side, self.popularity, features)
        return self.encoder(views, mask)

    def map_input(self, z: Tensor, log: ProfileLog, item_vectors: Tensor, item_seen: Tensor) -> Tensor:
        """User-map input [U, dim + nb * d + 1]; ``item_vectors`` [n_items, nb * d] (branches side by side)."""
        ok = log.item >= 0
        ok[ok.clone()] = item_seen[log.item[ok]]
        r, i = log.row[ok], log.item[ok]
        cnt = torch.bincount(r, minlength=log.n_users).float()
        mean = torch.zeros(log.n_users, item_vectors.shape[1]).index_add_(0, r, item_vectors[i])
        mean = mean / cnt.clamp(min=1)[:, None]
        return torch.cat([z, mean, (cnt > 0).float()[:, None]], 1)

    def user_vectors(
        self, log: ProfileLog, features: Tensor | None, item_vectors: Tensor, item_seen: Tensor
    ) -> Tensor:
        """Predicted stage-2 user vectors [U, nb * d] (branches side by side)."""
        z, _ = self.encode(log, features)
        return self.user_mean + self.user_map(self.map_input(z, log, item_vectors, item_seen))

    def item_vectors(self, rows: Tensor) -> Tensor:
        """Predicted stage-2 vectors [N, nb * d] of id-map items ``rows`` [N] from their side features."""
        return self.item_mean + self.item_map(self.side.features(len(self.spec.categories))[rows])

    def split(self, x: Tensor) -> dict[str, Tensor]:
        """[N, nb * d] -> branch -> [N, d]."""
        d = self.branch_dim
        return {b: x[:, k * d : (k + 1) * d] for k, b in enumerate(self.branches)}

    # -- registry round trip -------------------------------------------------------------
    def tensors(self) -> dict[str, Tensor]:
        out = {f"{PREFIX}{k}": v.detach().float().contiguous() for k, v in self.state_dict().items()}
        out |= self.side.tensors(f"{PREFIX}item.")
        out[f"{PREFIX}popularity"] = self.popularity.float()
        out[f"{PREFIX}user_features"] = self.user_features
        return out

    def meta(self) -> dict[str, Any]:
        return {
            "spec": self.spec.model_dump(),
            "views": self.spec.names,
            "branches": list(self.branches),
            "branch_dim": self.branch_dim,
            **self.sizes,
        }

    @classmethod
    def from_tensors(cls, tables: Mapping[str, Tensor], meta: Mapping[str, Any]) -> ProfileModel:
        t = {k: v for k, v in tables.items() if k.startswith(PREFIX)}
        model = cls(
            ViewSpec.model_validate(meta["spec"]),
            ItemSide.from_tensors(t, f"{PREFIX}item."),
            t[f"{PREFIX}popularity"],
            t[f"{PREFIX}user_features"],
            dim=meta["dim"],
            hidden=meta["hidden"],
            map_hidden=meta["map_hidden"],
            branches=meta["branches"],
            branch_dim=meta["branch_dim"],
        )
        names = set(model.state_dict())
        model.load_state_dict({k[len(PREFIX) :]: v for k, v in t.items() if k[len(PREFIX) :] in names})
        return model.eval()
