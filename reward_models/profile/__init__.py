"""Stage 1 of the reward model: a multi-view profile encoder and the maps that place cold
users (from their profile) and cold items (from their attributes) in stage 2's space.

    from reward_models.profile import ProfileModel, build_views
    d, z, losses = fit_stage1_encoder(ds, data, cfg)   # reward_models.profile.fit

See docs/reward-model.md (stage 1) for the views, the losses and the readout's cold path.
"""

from reward_models.profile.encoder import ProfileEncoder, info_nce, view_dropout
from reward_models.profile.model import ProfileModel
from reward_models.profile.spec import ItemSide, ViewSpec, build_spec, item_side
from reward_models.profile.views import ProfileLog, build_views, feature_matrix

__all__ = [
    "ItemSide",
    "ProfileEncoder",
    "ProfileLog",
    "ProfileModel",
    "ViewSpec",
    "build_spec",
    "build_views",
    "feature_matrix",
    "info_nce",
    "item_side",
    "view_dropout",
]
