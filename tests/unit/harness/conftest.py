"""The rehearsals' roots under /srv (tests/unit/devicelib.py) are removed after each test module, and at the end of the
session those of every test process that ended (ansible-test units forks one for each test)."""

from __future__ import annotations

import pytest
from devicelib import remove_requested_roots, remove_roots_of_ended_processes


@pytest.fixture(scope="module", autouse=True)
def _remove_device_roots():
    yield
    remove_requested_roots()


def pytest_sessionfinish():
    remove_roots_of_ended_processes()
