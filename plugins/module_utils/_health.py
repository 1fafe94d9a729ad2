# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""One look at a host's services: does each answer its health URL with 200, and if not, what does its
unit's journal say (the health_wait module; its action repeats the look until all answer)."""

from __future__ import annotations

import subprocess
import urllib.error

from ansible.module_utils.urls import open_url


def answer(url: str, timeout: float) -> tuple[int | None, str]:
    """(HTTP status or None, what went wrong in a few words; empty when 200). No proxy: the URLs are the
    plan's own addresses on the host, which a site's http_proxy must not capture."""
    try:
        with open_url(url, timeout=timeout, use_proxy=False, follow_redirects="none") as response:
            return response.status, "" if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return error.code, f"HTTP {error.code}"
    except urllib.error.URLError as error:
        reason = getattr(error.reason, "strerror", None) or str(error.reason)
        return None, str(reason).lower()
    except (OSError, ValueError) as error:  # timeouts, resets, a malformed URL
        return None, str(error).lower() or type(error).__name__


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=15).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def journal(unit: str, lines: int) -> list[str]:
    """The unit's newest journal lines of its current run (its invocation), so a milestone of the run
    before a restart is not taken for this one's; the unit's newest lines when it has no current run."""
    invocation = _run(["systemctl", "show", "-p", "InvocationID", "--value", unit]).strip()
    match = [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", unit]
    text = _run(["journalctl", *match, "-n", str(lines), "--no-pager", "-o", "cat"])
    return [line for line in text.splitlines() if line.strip()]


# The options of the module and its action alike (the action validates them before its first look).
ARGUMENT_SPEC = {
    "targets": {"type": "list", "elements": "dict", "required": True},
    "timeout": {"type": "int", "default": 1800},
    "delay": {"type": "int", "default": 5},
    "progress_interval": {"type": "int", "default": 15},
    "journal_lines": {"type": "int", "default": 40},
    "request_timeout": {"type": "int", "default": 5},
    "stall_timeout": {"type": "int", "default": 0},
}


def incomplete(targets: list) -> list[str]:
    """The positions of targets that lack a name, a unit or a health URL (bad input: refused before any look)."""
    return [str(index) for index, target in enumerate(targets)
            if not isinstance(target, dict) or not (target.get("name") and target.get("unit") and target.get("health_url"))]


def look(targets: list[dict], journal_lines: int, timeout: float) -> list[dict]:
    """Each target's status at its whole health URL (the plan's); the journal only of those not answering 200."""
    seen = []
    for target in targets:
        url = target["health_url"]
        status, problem = answer(url, timeout)
        seen.append({"name": target["name"], "unit": target["unit"], "url": url, "status": status,
                     "healthy": status == 200, "problem": problem,
                     "journal": [] if status == 200 else journal(target["unit"], journal_lines)})
    return seen
