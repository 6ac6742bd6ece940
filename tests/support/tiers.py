"""The two tiers of the suite: which tests the quick tier leaves out.

`./scripts/test` runs every test (CI runs it). `./scripts/test --quick` (`pytest --quick`), for
while you work, runs those not marked `slow`: the tests that run in the test process (protocol,
units, the metadata contract on SQLite), and smoke tests that start a real agent and drive it
with nats-py and nats.js. tests/conftest.py marks a test `slow` when

- its id starts with an entry of `SLOW` (a directory ending in "/", a module, or one test of a
  module with all its parameters) and with no longer entry of `QUICK`, or
- it starts etcd or an S3-compatible server for itself (`SERVERS`).

The entries come from measured durations (`pytest --durations=0` over the whole suite, see
docs/development.md): what starts agents, nats-server, Spark, etcd or moto is slow, and so are
the property tests that take seconds; what runs in the test process is quick. `--quick` does
not even import a directory or module whose tests are all slow (its header says how many).
Marking only selects: nothing is skipped, and the full run includes every marker (`-m slow`
runs the slow tier alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SLOW: tuple[str, ...] = (
    # Jepsen-style runs of agents under injected faults: half a minute or more each.
    "tests/fault/",
    # Spark jobs: a JVM for each module, tens of seconds for many tests.
    "tests/pipeline/",
    # The benchmark suite against every system, and its nats.js load.
    "tests/bench/",
    # Agents as subprocesses, each a few seconds to start (nine on this 2-core machine when it
    # is busy), most tests against nats-server too.
    "tests/e2e/",
    "tests/logs/",
    "tests/security/",
    "tests/server/",
    "tests/tenancy/",
    "tests/test_from_nats_server.py::test_check_config",
    "tests/test_from_nats_server.py::test_refused_key_stops_the_agent",
    # A fresh virtualenv and pip installs, and wheels built: minutes.
    "tests/test_readme.py",
    "tests/test_packaging.py",
    # A real etcd cluster of three, and two-process SQLite writers.
    "tests/metadata/test_etcd.py",
    "tests/metadata/test_sqlite.py::test_cas_across_two_processes",
    "tests/metadata/test_sqlite.py::test_kill_9_loses_no_acknowledged_commit",
    # Property tests over hundreds of generated cases: 4 to 15 s each on a busy machine.
    "tests/consumer/test_config.py::test_normalized_configs_roundtrip_and_are_stable",
    "tests/jetstream/test_subjects.py::test_colliding_finds_exactly_the_stored_patterns_that_collide",
    "tests/jetstream/test_subjects.py::test_colliding_walks_only_the_branches_that_can_collide",
    "tests/jetstream/test_subjects.py::test_collide_iff_common_subject",
    "tests/jetstream/test_subjects.py::test_index_agrees_with_brute_force",
    "tests/jetstream/test_subjects.py::test_is_subset_agrees_with_enumeration",
    "tests/protocol/test_parser.py::test_corrupted_valid_streams",
    "tests/protocol/test_parser.py::test_garbage_only_raises_protocol_error_and_ignores_splitting",
    "tests/protocol/test_parser.py::test_valid_frames_round_trip_under_any_split",
    "tests/storage/test_segment.py::test_compressed_object_round_trip",
    "tests/storage/test_segment.py::test_object_round_trip",
    "tests/stream/test_publish_rules.py::test_plain_path_plans_exactly_as_message_by_message",
    "tests/test_natsconf.py::test_round_trip",
)

QUICK: tuple[str, ...] = (
    # A real agent with nats-py: create a stream, publish, read back.
    "tests/e2e/test_smoke.py",
    # A real agent (and nats-server) with nats.js: the shortest of its scripts.
    "tests/e2e/test_atomic_batch.py::test_nats_js_batch_publisher",
    # How a failing nats.js script reports: node alone, no server.
    "tests/e2e/test_nats_js.py::test_a_failing_script_fails_the_test_naming_its_step",
)

# Fixtures that start a server for the test, and parameters that make a fixture start one: a
# real etcd, the S3-compatible moto (the contract suites' etcd and s3 backends among them).
SERVERS: frozenset[str] = frozenset(
    {"etcd", "etcd_server", "etcd-tls-auth", "secure_etcd_server", "s3", "s3_server"}
)


def _matches(nodeid: str, entry: str) -> bool:
    if entry.endswith("/"):
        return nodeid.startswith(entry)
    return nodeid == entry or nodeid.startswith((entry + "::", entry + "["))


def is_slow_path(path: str) -> bool:
    """Whether every test under `path` (a directory ending in "/" or a module, from the
    repository root) is slow: a slow entry covers it and no quick entry lies within."""
    return is_slow(path) and not any(q.startswith(path) for q in QUICK)


def starts_a_server(fixtures: Iterable[str], params: Mapping[str, object]) -> bool:
    """Whether a test with these fixtures and parameters starts etcd or an S3 server."""
    return any(f in SERVERS for f in fixtures) or any(
        isinstance(v, str) and v in SERVERS for v in params.values()
    )


def is_slow(nodeid: str) -> bool:
    """Whether the test `nodeid` (as pytest names it, from the repository root) is slow by
    the entries of `SLOW` and `QUICK`."""
    entries = [(len(e), e in SLOW) for e in (*SLOW, *QUICK) if _matches(nodeid, e)]
    return max(entries)[1] if entries else False
