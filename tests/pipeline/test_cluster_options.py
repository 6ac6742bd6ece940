"""What a driver hands its executors: on a cluster they have an environment of their own, so the
data source's store options take the driver's S3 settings from its environment when the
options do not give them, and travel with the tasks."""

from __future__ import annotations

import pickle

import pytest

from infinistream.pipeline.options import StoreOptions


def test_data_source_options_carry_the_drivers_s3_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "driver-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "driver-secret")
    options = StoreOptions.from_mapping({"objects": "s3://b", "metadata": "etcd://e:2379"})
    shipped = pickle.loads(pickle.dumps(options))
    assert (shipped.s3_endpoint, shipped.s3_region) == ("http://127.0.0.1:9000", "eu-west-1")
    assert (shipped.s3_access_key_id, shipped.s3_secret_access_key) == (
        "driver-id",
        "driver-secret",
    )
    # Options given win over the environment.
    given = StoreOptions.from_mapping(
        {"objects": "s3://b", "metadata": "etcd://e:2379", "s3_access_key_id": "given"}
    )
    assert given.s3_access_key_id == "given"
