# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The controller's half of the no-op check (playbooks/converge.yml): what to look at on each host, and the
digest of everything the controller deploys from.

A deploy whose inputs did not change since the last whole deploy, on hosts that did not drift, has nothing
to do. The inputs are the plan (every name, port, path, setting and file the hosts get, derived from the
inventory and the discovered GPUs), the collection's own code (plugins, roles, playbooks, data), the TLS
material the front door installs, the model directory the operator stages from, and each host's operator
variables (secrets and role overrides, which the plan does not hold: mixed in by the converge_state action).
The host side (module_utils/_converge.py) compares the digest and a snapshot with its record.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ..host import _names

COLLECTION_ROOT = Path(__file__).resolve().parents[3]
CODE_PARTS = ("plugins", "roles", "playbooks", "data", "meta", "galaxy.yml")
# Operator variables that can change what a deploy does: the collection's own and each role's overrides.
VARIABLE_PREFIXES = ("vllm_omni_", "artifacts_", "engine_", "firewall_", "footprint_", "frontdoor_", "monitoring_",
                     "mooncake_", "preflight_", "python_venv_", "router_", "upgrade_", "plan_", "smoke_")
# Not the operator's: computed in the run before the check (the plan, discovery, the plays' own variables;
# tests/unit/plugins/plugin_utils/test_converge.py keeps this in step with those plays' set_fact and register).
COMPUTED_VARIABLES = frozenset({
    "vllm_omni_plan", "vllm_omni_limit", "vllm_omni_gpu_facts", "vllm_omni_os_facts", "vllm_omni_platform",
    "vllm_omni_locks", "vllm_omni_wheel_sets", "plan_result", "plan_discovery_pending", "plan_fact",
})
# Switches that ask for one run to do something (and so are never a reason for the next run to do it again).
RUN_SWITCHES = frozenset({"vllm_omni_converge", "upgrade_force_restart", "frontdoor_certificate_renew"})

_code_digests: dict[str, str] = {}


def host_look(plan: Mapping, host: str) -> dict:
    """What converge_state looks at on ``host``: the footprint's files, directories, units and venvs, the
    artifact trees it receives, its kernel settings, its firewall table, and the health URLs it serves."""
    footprint = plan["footprint"].get(host)
    if footprint is None:
        return {}
    files = [f["path"] for f in footprint["files"]]
    units = [u["name"] for u in footprint["units"]]
    router = plan["router"]
    if host in router["per_host"] and router["frontdoor"]["enabled"]:
        units.append(router["frontdoor"]["service"])
    artifacts = plan["artifacts"]
    mine = set(artifacts["per_host"].get(host, {}).get("artifacts", []))
    health = [p["health_url"] for p in plan["hosts"].get(host, {}).get("pipelines", []) if p.get("health_url")]
    if host in router["per_host"]:
        health.append(router["per_host"][host]["admin_readiness_url"])
    master = plan["mooncake_master"]
    if master["enabled"] and host in master.get("per_host", {}):
        health.append(master["per_host"][host]["health_url"])
    monitoring = plan["monitoring"]
    if monitoring["enabled"] and host in monitoring.get("per_host", {}):
        health.append(monitoring["per_host"][host]["ready_url"])
    firewall = plan["firewall"]
    return {
        "files": files,
        "directories": [d["path"] for d in footprint["directories"]],
        "units": units,
        "venvs": list(footprint["venvs"]),
        "trees": [a["host_dir"] for a in artifacts["items"] if a["id"] in mine],
        "sysctl": plan["paths"]["mooncake_sysctl"] if plan["paths"]["mooncake_sysctl"] in files else None,
        "firewall": f"inet {firewall['table']}" if firewall["enabled"] and host in firewall["per_host"] else None,
        "health": health,
    }


def code_digest(root: Path = COLLECTION_ROOT) -> str:
    """Every file of the collection a deploy runs (once per controller process: the code does not change mid-run)."""
    key = str(root)
    if key not in _code_digests:
        digest = hashlib.sha256()
        for part in CODE_PARTS:
            base = root / part
            paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
            for path in paths:
                if "__pycache__" in path.parts or path.suffix == ".pyc":
                    continue
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _code_digests[key] = digest.hexdigest()
    return _code_digests[key]


def _tree_listing(directory: str) -> list[str]:
    """A directory the operator stages from, by its files' names, sizes and change times (not read: weights)."""
    listing = []
    for root, _directories, files in os.walk(directory):
        for name in sorted(files):
            status = os.stat(os.path.join(root, name))
            listing.append(f"{os.path.relpath(os.path.join(root, name), directory)} {status.st_size} {status.st_mtime_ns}")
    return sorted(listing)


def _tls_files(plan: Mapping, environ: Mapping) -> list[Path]:
    """The front door's TLS material on the controller: the operator's files, or the collection's own CA and
    certificates ($VLLM_OMNI_CACHE/tls)."""
    frontdoor = plan["router"]["frontdoor"]
    if not frontdoor["enabled"] or not plan["router"]["hosts"]:
        return []
    tls = frontdoor["tls"]
    if tls["source"] != "generated":
        return [Path(tls[name]) for name in ("cert_file", "key_file", "ca_file") if tls.get(name)]
    directory = _names.tls_dir(environ)
    return sorted(p for p in directory.glob("*") if p.is_file()) if directory.is_dir() else []


def fleet_digest(plan: Mapping, environ: Mapping | None = None, root: Path = COLLECTION_ROOT,
                 run=subprocess.run) -> str:
    """The digest of what every host's deploy is made from, except each host's own variables.

    A generated front-door certificate that a deploy would renew now (the plan's ``renew_days``) is part of it: the
    run that renews it then differs from the record, and the one after it once more (the renewed state)."""
    environ = os.environ if environ is None else environ
    digest = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode())
    digest.update(("certificates due: " + ",".join(certificates_due(plan, environ, run))).encode())
    digest.update(code_digest(root).encode())
    for path in _tls_files(plan, environ):
        digest.update(str(path).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"missing") + b"\0")
    for artifact in plan["artifacts"]["items"]:
        source = artifact.get("source") or {}
        if source.get("kind") == "directory" and source.get("directory"):
            digest.update("\n".join(_tree_listing(source["directory"])).encode())
    return digest.hexdigest()


def operator_variables(task_vars: Mapping) -> dict:
    """The variables of a host that are the operator's to set (their values as given, templates unexpanded)."""
    chosen = {}
    for name in sorted(task_vars):
        if not name.startswith(VARIABLE_PREFIXES) or name in COMPUTED_VARIABLES or name in RUN_SWITCHES:
            continue
        chosen[name] = task_vars[name]
    return chosen


def variables_digest(variables: Mapping) -> str:
    return hashlib.sha256(json.dumps(variables, sort_keys=True, default=str).encode()).hexdigest()


def host_digest(fleet: str, variables: str) -> str:
    return hashlib.sha256(f"{fleet}\0{variables}".encode()).hexdigest()


def certificates_due(plan: Mapping, environ: Mapping | None = None, run=subprocess.run) -> list[str]:
    """Router hosts whose generated front-door certificate on the controller expires within the plan's renewal
    window (a deploy would issue a new one), or cannot be read."""
    frontdoor = plan["router"]["frontdoor"]
    if not frontdoor["enabled"] or frontdoor["tls"]["source"] != "generated":
        return []
    environ = os.environ if environ is None else environ
    window = str(int(frontdoor["tls"]["renew_days"]) * 86400)
    due = []
    for host, values in sorted(plan["router"]["per_host"].items()):
        certificate = _names.tls_dir(environ) / f"{_names.tls_stem(host, values['ip'])}.pem"
        result = run(["openssl", "x509", "-in", str(certificate), "-noout", "-checkend", window],
                     capture_output=True, text=True, check=False)
        if result.returncode != 0:
            due.append(host)
    return due
