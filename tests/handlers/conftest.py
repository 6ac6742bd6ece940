"""Fixtures of the handlers' unit tests: one account's JetStream API over real stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.apiaccount import Account, api_account


@pytest.fixture
async def account(tmp_path: Path) -> AsyncIterator[Account]:
    async with api_account(tmp_path) as running:
        yield running
