"""The rehearsals' roots under /srv (tests/unit/devicelib.py) are removed after each test module."""

from __future__ import annotations

import pytest
from devicelib import remove_requested_roots


@pytest.fixture(scope="module", autouse=True)
def _remove_device_roots():
    yield
    remove_requested_roots()
