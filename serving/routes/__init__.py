"""One router per feature: ``act`` (slates), ``events`` (feedback), ``models`` (what is served,
reload), ``health`` (liveness, readiness, Prometheus metrics). ``serving.app.create_app``
includes them all."""

from serving.routes import act, events, health, models

ROUTERS = (act.router, events.router, models.router, health.router)

__all__ = ["ROUTERS"]
