# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""How a change rolls through pipelines that already serve: in waves, a bounded number down at a time.

Deploy and upgrade share one path (roles/upgrade): pipelines that do not serve yet (a first deploy, a
new pipeline, a stopped one) start together; pipelines that serve and must restart leave the routers,
restart, are checked and come back, at most ``max_unavailable`` of them at a time across the fleet.

``vllm_omni_rolling_max_unavailable`` is a count (``2``) or a share of the serving pipelines
(``"25%"``, rounded down, at least 1), as Kubernetes' ``maxUnavailable``. It never takes the last
serving pipeline out: with N serving, at most N-1 are down together, and where only one serves its
restart is an outage the plan says so about.
"""

from __future__ import annotations

import re

PERCENT = re.compile(r"([1-9][0-9]?|100)%")


def bound(max_unavailable: int | str, serving: int) -> int:
    """How many pipelines may be down at once, of ``serving`` pipelines that serve now."""
    if isinstance(max_unavailable, str):
        match = PERCENT.fullmatch(max_unavailable)
        if not match:
            raise ValueError(f"max_unavailable {max_unavailable!r} is neither a count nor a percentage")
        limit = serving * int(match.group(1)) // 100
    else:
        limit = int(max_unavailable)
    return max(1, min(limit, serving - 1)) if serving > 1 else 1


def waves(changed: dict[str, list[str]], serving: int, max_unavailable: int | str,
          whole_hosts: bool = False) -> dict:
    """Split the serving pipelines that change (host -> names, in the host's order) into waves.

    Each wave maps host -> the names it restarts together; a wave never holds more than the bound.
    Pipelines are taken round-robin over the hosts (each host's first, then each host's second...)
    so one wave spreads over hosts and a host keeps serving while it can. ``whole_hosts``: a wave is
    one host's changed pipelines, all of them (the bound does not apply: the operator asked for it).
    """
    hosts = [host for host in sorted(changed) if changed[host]]
    limit = bound(max_unavailable, serving)
    if whole_hosts:
        planned = [{host: list(changed[host])} for host in hosts]
    else:
        order = [(host, changed[host][index]) for index in range(max((len(changed[h]) for h in hosts), default=0))
                 for host in hosts if index < len(changed[host])]
        planned = []
        for start in range(0, len(order), limit):
            wave: dict[str, list[str]] = {}
            for host, name in order[start:start + limit]:
                wave.setdefault(host, []).append(name)
            planned.append(wave)
    notes = []
    total = sum(len(names) for names in changed.values())
    if total and serving <= 1:
        notes.append("only one pipeline serves: its restart is an outage (add a pipeline to roll without one)")
    elif total and not whole_hosts and _asked(max_unavailable, serving) > limit:
        notes.append(f"at most {limit} of {serving} serving pipelines restart at once (one keeps serving)")
    return {"waves": planned, "bound": limit, "pipelines": total, "notes": notes}


def _asked(max_unavailable: int | str, serving: int) -> int:
    if isinstance(max_unavailable, str):
        return serving * int(PERCENT.fullmatch(max_unavailable).group(1)) // 100
    return int(max_unavailable)
