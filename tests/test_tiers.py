"""The quick tier's list of slow tests (tests/support/tiers.py) names only what exists, and
matches a test with its parameters but no other test."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from support.tiers import QUICK, SLOW, is_slow, is_slow_path, starts_a_server

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("entry", [*SLOW, *QUICK])
def test_every_entry_names_a_directory_a_module_or_a_test(entry: str) -> None:
    path, _, test = entry.partition("::")
    assert (ROOT / path).exists(), f"{path} does not exist: remove or correct the entry"
    if entry.endswith("/"):
        assert (ROOT / path).is_dir()
    if test:
        source = (ROOT / path).read_text()
        assert re.search(rf"^(async )?def {re.escape(test)}\(", source, re.M), entry


def test_an_entry_covers_its_tests_and_their_parameters_only() -> None:
    assert is_slow("tests/fault/test_fault_kill.py::test_kill[3]")
    assert not is_slow("tests/faultless/test_x.py::test_y")
    assert is_slow("tests/test_readme.py::test_quick_start_in_order")
    assert not is_slow("tests/test_readme.pyx::test_y")


def test_the_longest_entry_decides() -> None:
    # e2e is slow, but the quick tier keeps its smoke test and one nats.js test, both kinds.
    assert is_slow("tests/e2e/test_fetch.py::test_fetch_waits[agent]")
    assert not is_slow("tests/e2e/test_smoke.py::test_create_publish_read")
    batch = "tests/e2e/test_atomic_batch.py::test_nats_js_batch_publisher"
    assert not is_slow(f"{batch}[agent]") and not is_slow(f"{batch}[nats-server]")
    assert is_slow("tests/e2e/test_atomic_batch.py::test_a_batch_is_stored_whole[agent]")


def test_a_test_that_starts_its_own_server_is_slow() -> None:
    assert starts_a_server(["backend", "store"], {"backend": "etcd"})
    assert not starts_a_server(["backend", "store"], {"backend": "sqlite"})
    assert starts_a_server(["s3_server", "tmp_path"], {})
    assert not starts_a_server(["tmp_path"], {"fault": 3})


def test_only_what_holds_slow_tests_alone_is_left_uncollected() -> None:
    assert is_slow_path("tests/pipeline/") and is_slow_path("tests/e2e/test_fetch.py")
    # What holds a quick test, or is only partly slow, is collected.
    assert not is_slow_path("tests/e2e/") and not is_slow_path("tests/e2e/test_atomic_batch.py")
    assert not is_slow_path("tests/protocol/test_parser.py") and not is_slow_path("tests/")


def test_the_full_run_leaves_nothing_out() -> None:
    # The test command CI runs selects every test: no marker expression, keyword, ignore or
    # deselect in pytest's defaults, and only --quick in the script's quick branch.
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = options["ini_options"].get("addopts", "").split()
    assert not {"-m", "-k", "--quick", "--ignore", "--deselect"} & set(addopts), addopts
    script = (ROOT / "scripts" / "test").read_text()
    full = [line for line in script.splitlines() if "-m pytest" in line and "--quick" not in line]
    assert full and all(" -m " not in line.split("pytest", 1)[1] for line in full), full
