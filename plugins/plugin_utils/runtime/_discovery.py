# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""What discovery found, kept on the controller, and what a ``--limit`` may and may not leave out.

Every deploy discovers the GPUs (``vllm_omni_gpu_facts``) and the OS (``vllm_omni_os_facts``) of the
hosts it runs on, and the plan is made from them. Under ``--limit`` only the limited hosts are
discovered, but the plan is still the whole fleet's (ports, router members, the firewall's peers,
spanning pipelines all depend on every host). So each discovery is kept on the controller,
``$VLLM_OMNI_CACHE/discovery/<host>.json`` (written atomically; GPU and OS facts only, no secret),
and a host outside the limit is planned from its last discovery, or from its inventory
``vllm_omni_gpus`` (and ``vllm_omni_host_platform``) where there is none. A host with neither is
one problem naming the way out: run once without ``--limit``, or add the host to it.

A limit must also not leave the fleet inconsistent: ``limit_problems`` refuses one that changes some
hosts of a pipeline that spans hosts but not the others (its engines must agree on ports, ranks and
versions). Whether the router host may stay out of a limit is decided at run time, from the running
router's members (playbooks/preflight.yml): ``router_needs`` says which URLs it must already route to.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

from ..host._names import CONTROLLER_DISCOVERY, cache_root
from ..plan._problems import Problem, host_where

GPU_FACTS = "vllm_omni_gpu_facts"
OS_FACTS = "vllm_omni_os_facts"
FACTS = (GPU_FACTS, OS_FACTS)
SCHEMA = 1
# Inventory host names are free text; a file name is not (no path separators, no dot files).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@+-]")


def cache_dir(environ=None) -> Path:
    return cache_root(environ) / CONTROLLER_DISCOVERY


def cache_file(directory: Path, host: str) -> Path:
    name = _UNSAFE.sub("_", host)
    if name.startswith("."):
        name = "_" + name[1:]
    return directory / f"{name}.json"


def read(directory: Path, host: str) -> dict:
    """The cached facts of ``host`` ({GPU_FACTS: ..., OS_FACTS: ...}, either may be absent); {} if none.

    A file that is not ours (unreadable, another host's, another schema) counts as no cache: it is
    written again by the host's next discovery."""
    try:
        record = json.loads(cache_file(directory, host).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("schema") != SCHEMA or record.get("host") != host:
        return {}
    return {name: record[name] for name in FACTS if isinstance(record.get(name), dict)}


def write(directory: Path, host: str, facts: dict) -> bool:
    """Keep ``host``'s discovered facts (only GPU_FACTS and OS_FACTS); True if the file changed.

    Atomic: a temporary file in the same directory, then a rename, so a reader (another run, a
    killed run) never sees half a file."""
    kept = {name: facts[name] for name in FACTS if isinstance(facts.get(name), dict)}
    if not kept:
        return False
    old = read(directory, host)
    merged = {**old, **kept}  # a host discovered for its OS only (a router host) keeps its GPU entry, if any
    if old == merged and cache_file(directory, host).is_file():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    record = {"schema": SCHEMA, "host": host, "discovered": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **merged}
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".discovery-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out, indent=1, sort_keys=True)
            out.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, cache_file(directory, host))
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True


def _outside_fix(host: str) -> str:
    return f"run once without --limit, or add {host} to --limit"


def fill_from_cache(inventory: dict, run_hosts: set[str], cached: dict[str, dict]) -> tuple[list[str], list[Problem]]:
    """Give each host outside the run (``run_hosts``: the limited hosts) its cached facts, in place.

    ``cached``: host -> its cache (``read``). Returns (hosts planned from the cache, problems): an
    engine host outside the limit with neither cached GPUs nor ``vllm_omni_gpus``, and a host that
    builds a venv outside the limit with neither cached OS facts nor ``vllm_omni_host_platform``."""
    hostvars = inventory["hostvars"]
    engine_hosts = list(inventory.get("engine_hosts") or [])
    every = list(dict.fromkeys(engine_hosts + list(inventory.get("router_hosts") or [])
                               + list(inventory.get("master_hosts") or []) + list(inventory.get("monitoring_hosts") or [])))
    from_cache, problems = [], []
    for host in every:
        if host in run_hosts:
            continue
        variables = hostvars.setdefault(host, {})
        facts = cached.get(host) or {}
        used = False
        for name in FACTS:
            if name not in variables and name in facts:
                variables[name] = facts[name]
                used = True
        if used:
            from_cache.append(host)
        if host in engine_hosts and GPU_FACTS not in variables and "vllm_omni_gpus" not in variables:
            problems.append(Problem(host_where(host), "vllm_omni_gpus",
                                    "is not set and no discovery of this host is cached on the controller (it is "
                                    "outside --limit, so it was not discovered in this run)", _outside_fix(host)))
        elif OS_FACTS not in variables and variables.get("vllm_omni_host_platform", "auto") == "auto" \
                and host in _venv_hosts(inventory):
            problems.append(Problem(host_where(host), "vllm_omni_host_platform",
                                    "is auto and no discovery of this host's OS is cached on the controller (it is "
                                    "outside --limit, so it was not discovered in this run)",
                                    _outside_fix(host) + ", or set vllm_omni_host_platform for it"))
    return sorted(from_cache), problems


def _venv_hosts(inventory: dict) -> set[str]:
    """Hosts whose platform matters (they build a venv): engine, router and Mooncake master hosts as named
    in the inventory (a default router host is an engine host anyway)."""
    return set(inventory.get("engine_hosts") or []) | set(inventory.get("router_hosts") or []) \
        | set(inventory.get("master_hosts") or [])


def limit_problems(plan: dict, run_hosts: set[str]) -> list[Problem]:
    """A limit that would change some hosts of a spanning pipeline and not the others."""
    problems = []
    for name, pipeline in sorted((plan.get("distributed_pipelines") or {}).items()):
        hosts = list(dict.fromkeys(pipeline.get("hosts") or []))
        inside = [h for h in hosts if h in run_hosts]
        outside = [h for h in hosts if h not in run_hosts]
        if inside and outside:
            problems.append(Problem(host_where(inside[0]), "--limit",
                                    f"leaves out {', '.join(outside)}, which run{'s' if len(outside) == 1 else ''} "
                                    f"part of pipeline {name} (it spans {', '.join(hosts)}; its engines change "
                                    "together)", f"add {','.join(outside)} to --limit"))
    return problems


def router_needs(plan: dict, run_hosts: set[str]) -> dict[str, dict]:
    """router host outside the run -> {"admin_url", "urls"}: the worker URLs of limited hosts that it must
    already route to, since the router play will not run there. Routers inside the run reconcile their
    members themselves; a router outside it with nothing to check is left out."""
    urls = sorted({entry["url"] for host, section in (plan.get("hosts") or {}).items() if host in run_hosts
                   for entry in section.get("pipelines") or []
                   if entry.get("url") and entry.get("process", "single") in ("single", "head")})
    router = plan.get("router") or {}
    needs = {}
    for host in router.get("hosts") or []:
        if host in run_hosts or not urls:
            continue
        needs[host] = {"admin_url": router["per_host"][host]["admin_url"], "urls": urls}
    return needs
