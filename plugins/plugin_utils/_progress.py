# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Progress of a long step on a host, as one line for the play's output (the artifact_pull action).

A pull's progress file holds what ``artifact.py`` says it is doing (checking files) and then rsync's
``--info=progress2`` output: carriage-return separated lines of bytes so far, percent, rate, and
time left. Only the newest line counts.
"""

from __future__ import annotations

import re

RSYNC_PROGRESS = re.compile(r"([\d,]+)\s+(\d+)%\s+(\S+/s)\s+(\d+:\d{2}:\d{2})")


def latest(text: str) -> str:
    """The newest non-empty line of a progress file (rsync rewrites its line with carriage returns)."""
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    return lines[-1] if lines else ""


def progress_line(host: str, artifact: str, text: str, total_bytes: int | None, elapsed: float) -> str | None:
    """``host: artifact: 1.20 of 3.22 GB (37%), 310.52MB/s, 0:00:06 left`` or what the script says it
    is doing; None when the file says nothing yet."""
    line = latest(text)
    if not line:
        return None
    matches = list(RSYNC_PROGRESS.finditer(line))
    if not matches:
        return f"{host}: {artifact}: {line} ({elapsed:.0f} s)"
    found = matches[-1]
    done = int(found.group(1).replace(",", ""))
    of = f" of {total_bytes / 1e9:.2f}" if total_bytes else ""
    return f"{host}: {artifact}: {done / 1e9:.2f}{of} GB ({found.group(2)}%), {found.group(3)}, {found.group(4)} left"
