"""The agent's own health probes: can it reach object storage, and the metadata store?

Each asks its store something cheap whose answer is known when the store works: the object
store for an object that is never written (not found is healthy), the metadata store for its
revision. The object store probed is a second handle on the same store with no retries and a
short timeout (see wiring), so a failing store is reported with its own error, at once.
"""

from __future__ import annotations

from infinistream.metadata.kv import MetadataStore
from infinistream.server.monitoring.health import HealthProbe
from infinistream.storage import ObjectStore
from infinistream.storage.objects import ObjectNotFoundError, ObjectStoreError, local_root

PROBE_KEY = "infinistream-health-probe"


def object_storage_probe(objects: ObjectStore) -> HealthProbe:
    root = local_root(objects.url)

    async def probe() -> str | None:
        if root is not None and not root.is_dir():
            # A local store answers "not found" for any key once its directory is gone.
            return f"object storage unavailable: directory {root} is missing"
        try:
            await objects.head(PROBE_KEY)
        except ObjectNotFoundError:
            return None
        except ObjectStoreError as exc:
            return f"object storage unavailable: {exc}"
        return None

    return probe


def metadata_probe(meta: MetadataStore) -> HealthProbe:
    async def probe() -> str | None:
        try:
            await meta.revision()
        except Exception as exc:  # any backend's failure is the answer
            return f"metadata store unavailable: {type(exc).__name__}: {exc}"
        return None

    return probe
