"""Which policy version answers: load + warm in the background, swap atomically, follow a pointer.

``ModelManager.current`` is replaced by one assignment once the new version is loaded and
warmed, so a batch already dispatched finishes on the version it started with and the next
batch takes the new one: no request fails or waits for a reload. With ``follows`` set (the
registry pointer given as ``--policy``, ``production`` by default) a poller re-reads the
pointer every ``poll_s`` seconds and reloads when it moved; a pinned version is never
replaced except by ``POST /v1/models/reload``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from serving.acting import LoadedModel
from serving.config import ServeConfig
from serving.metrics import Metrics

log = logging.getLogger("parpo.serve")
POINTERS = ("production", "latest")


class ModelManager:
    def __init__(
        self,
        registry: str,
        version: str,
        cfg: ServeConfig,
        metrics: Metrics,
        *,
        warm_hook: Callable[[LoadedModel], None] | None = None,
    ) -> None:
        self.registry, self.cfg, self.metrics = registry, cfg, metrics
        self.follows = version if version in POINTERS else None
        self.pinned = None if self.follows else version
        self.current: LoadedModel | None = None
        self.reloading: str | None = None
        self.last_error: str | None = None  # the last failed load, until a load succeeds
        self._warm_hook = warm_hook  # tests inject a slow warm-up here
        self._lock = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None

    def _load(self, version: str | None) -> LoadedModel:
        m = LoadedModel.load(self.registry, version, self.cfg.runtime.seed)
        m.warm(self.cfg.exploration.samples, self.cfg.exploration.temperature)
        if self._warm_hook is not None:
            self._warm_hook(m)
        return m

    async def load(self, version: str | None = None) -> str:
        """Load and warm ``version`` (default: the followed pointer or the pinned version), then swap.

        Loading runs off the event loop (a thread) while the old version keeps serving.
        """
        target = version or self.follows or self.pinned
        async with self._lock:
            self.reloading = target
            try:
                m = await asyncio.to_thread(self._load, target)
            except Exception as e:
                self.metrics.reloads.labels("failed").inc()
                self.last_error = f"loading {target} failed: {e}"
                raise
            finally:
                self.reloading = None
            old = self.current
            self.current, self.last_error = m, None
            self.metrics.reloads.labels("ok").inc()
            if old is None or old.policy_version != m.policy_version:
                log.info("serving policy %s (reward %s)", m.policy_version, m.bundle.reward_version)
            return m.policy_version

    def pointed(self) -> str | None:
        """The version the followed pointer names now (None when pinned or unset)."""
        from parpo_core.artefacts import Registry

        if self.follows is None:
            return None
        ptr = Registry(self.registry).pointer("policy", self.follows)
        return None if ptr is None else ptr["version"]

    def start_polling(self) -> None:
        if self.follows is not None and self.cfg.poll_s > 0:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.poll_s)
            try:
                name = await asyncio.to_thread(self.pointed)
                if name is not None and self.current is not None and name != self.current.policy_version:
                    await self.load(name)
            except Exception as e:  # noqa: BLE001  (a bad new version must not stop the old one serving)
                log.error("reload from %s pointer failed: %s", self.follows, e)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
