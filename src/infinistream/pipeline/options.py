"""How a pipeline job, or a Spark executor, reaches the stores: plain, picklable URLs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from infinistream.metadata import MetadataStore, open_metadata
from infinistream.settings import Settings, settings_from_args
from infinistream.storage import ObjectStore


@dataclass(frozen=True)
class StoreOptions:
    objects: str
    metadata: str
    group: str = "default"
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreOptions:
        return cls(
            objects=settings.objects_url,
            metadata=settings.metadata_url,
            group=settings.group,
            s3_endpoint=settings.s3_endpoint,
            s3_region=settings.s3_region,
            s3_access_key_id=settings.s3_access_key_id,
            s3_secret_access_key=settings.s3_secret_access_key,
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StoreOptions:
        return cls.from_settings(settings_from_args(args))

    @classmethod
    def from_mapping(cls, options: dict[str, str]) -> StoreOptions:
        """From Spark data source options: `objects` and `metadata` URLs, or `store_dir`."""
        settings = Settings()
        if "store_dir" in options:
            settings.store_dir = options["store_dir"]
        settings.objects = options.get("objects")
        settings.metadata = options.get("metadata")
        settings.group = options.get("group", "default")
        settings.s3_endpoint = options.get("s3_endpoint")
        settings.s3_region = options.get("s3_region")
        settings.s3_access_key_id = options.get("s3_access_key_id")
        settings.s3_secret_access_key = options.get("s3_secret_access_key")
        if not settings.objects and not settings.metadata and "store_dir" not in options:
            raise ValueError(
                "say where the stream lives: option 'store_dir', or 'objects' and 'metadata'"
            )
        return cls.from_settings(settings)

    def open_objects(self) -> ObjectStore:
        return ObjectStore.from_url(
            self.objects,
            endpoint=self.s3_endpoint,
            region=self.s3_region,
            access_key_id=self.s3_access_key_id,
            secret_access_key=self.s3_secret_access_key,
        )

    def open_metadata(self) -> MetadataStore:
        return open_metadata(self.metadata)


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store options of `infinistream serve`, for pipeline commands."""
    add = parser.add_argument
    add("-sd", "--store_dir", dest="store_dir", help="Directory of the embedded store")
    add("-c", "--config", dest="config", help="Configuration file (nats-server syntax)")
    add("--objects", dest="objects", help="Object store URL")
    add("--metadata", dest="metadata", help="Metadata store URL")
    add("--group", dest="group", help="Virtual group (tenant) name (default: default)")
    add("--s3-endpoint", dest="s3_endpoint", help="S3-compatible endpoint URL")
    add("--s3-region", dest="s3_region", help="S3 region")
    add("--master", dest="master", default="local[*]", help="Spark master (default: local[*])")
