"""Where the unit tests find their helpers (unitlib.py, and testlib.py shared with the conformance suite).

ansible-test units runs pytest with its own configuration, not pyproject.toml's: tests/ (testlib.py,
shared with the conformance suite) and tests/unit/ (unitlib.py) are put on the path here.
"""

from __future__ import annotations

import sys
from pathlib import Path

for _path in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
