# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Each host's footprint: what a deploy creates there, from the plan and the names of ``_names``.

A host's footprint (``plan["footprint"][host]``) lists what a deploy creates there: accounts,
directories, files (each with the render-directory key whose text it receives), units and venvs,
plus what uninstall keeps. Roles install from it, ``stop``/``uninstall``/``status`` loop over it,
and deploy records it on the host (``paths.footprint_record``) so the next run can prune what the
plan no longer has without globbing for units.
"""

from __future__ import annotations

from ._names import (
    ARTIFACT_CONFIG,
    ARTIFACT_MANIFEST_DIR,
    COMPILE_CACHE_ROOT,
    ENGINE_ACCOUNT,
    ENGINE_UNIT_TEMPLATE,
    FIREWALL_DIR,
    FIREWALL_UNIT,
    GPU_METRICS_CONFIG,
    GPU_METRICS_UNIT,
    HOST_WHEELHOUSE,
    MASTER_ACCOUNT,
    MASTER_UNIT,
    MOONCAKE_SYSCTL,
    NFTABLES_DROPIN,
    PIPELINE_DROPIN,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DEFAULTS,
    PROMETHEUS_RULES,
    PROMETHEUS_TARGETS_DIR,
    ROUTER_ACCOUNT,
    ROUTER_SHAPE,
    ROUTER_STATE_DIR,
    ROUTER_UNIT,
    SELF_HEAL_CONFIG,
    SELF_HEAL_UNIT,
    STATE_DIR,
    SYSTEMD_UNIT_DIR,
    unit_path,
)

# --- footprints ---------------------------------------------------------------------------------


def _account(component: str, account: tuple[str, str, str]) -> dict:
    user, group, home = account
    return {"component": component, "user": user, "group": group, "home": home}


def _directory(path: str, component: str, owner: str = "root", group: str = "root", mode: str = "0755",
               remove: str = "always") -> dict:
    """``remove``: always (ours alone), if_empty (a shared parent such as /etc/nftables.d), never (kept data)."""
    return {"path": path, "component": component, "owner": owner, "group": group, "mode": mode, "remove": remove}


def _home(component: str, account: tuple[str, str, str]) -> dict:
    """A service account's home, owned by it on every deploy. Uninstall keeps homes (caches) but removes the
    account; a later deploy may give the new account another uid, and the kept home, still owned by the old
    one (or by whichever account got that uid since), would lock the service out of its working directory."""
    user, group, home = account
    return _directory(home, component, owner=user, group=group, mode="0700", remove="never")


def _file(path: str, render: str | None, component: str, owner: str = "root", group: str = "root",
          mode: str = "0644", secrets: bool = False) -> dict:
    """A file whose text is the render directory's ``render`` entry (plus host-only secrets if ``secrets``).

    ``render`` None: a file the render cannot hold (a secret, or TLS material made on the controller).
    """
    return {"path": path, "render": render, "component": component, "owner": owner, "group": group, "mode": mode,
            "secrets": secrets}


def _sysctl(host: str) -> dict:
    """Kernel settings on every host the Mooncake play runs on (engine and master hosts)."""
    return _file(MOONCAKE_SYSCTL, f"{host}/sysctl/{MOONCAKE_SYSCTL.rsplit('/', 1)[1]}", "mooncake")


def _engine_part(plan: dict, host: str) -> dict:
    paths = plan["paths"]
    user, group, _unused = ENGINE_ACCOUNT
    pipelines = plan["hosts"][host]["pipelines"]
    directories = [
        _directory(paths["config_root"], "engine", group=group, mode="0750"),
        _home("engine", ENGINE_ACCOUNT),
        _directory(paths["hf_home"], "engine", owner=user, group=group, mode="0750", remove="never"),
    ]
    files = [_file(paths["engine_unit_template"], f"{host}/systemd/{ENGINE_UNIT_TEMPLATE}", "engine")]
    units = []
    for pipeline in pipelines:
        name, unit = pipeline["name"], pipeline["unit"]
        directories.append(_directory(pipeline["paths"]["config_dir"], "engine", group=group, mode="0750"))
        directories.append(_directory(f"{SYSTEMD_UNIT_DIR}/{unit}.d", "engine"))
        files += [
            _file(pipeline["paths"]["stage_config"], f"{host}/{name}/stage_config.yaml", "engine", group=group,
                  mode="0640"),
            _file(pipeline["paths"]["env_file"], f"{host}/{name}/engine.env", "engine", group=group, mode="0640",
                  secrets=True),
            _file(pipeline["paths"]["unit_dropin"], f"{host}/{name}/{PIPELINE_DROPIN}", "engine"),
        ]
        units.append({"name": unit, "component": "engine", "pipeline": name})
    if plan["backend"]["compile_cache"]:  # the real engine's, for this version (a version change prunes the old)
        directories += [_directory(COMPILE_CACHE_ROOT, "engine", owner=user, group=group, mode="0750"),
                        _directory(plan["backend"]["compile_cache"], "engine", owner=user, group=group, mode="0750")]
    heal = plan["self_heal"]
    if host in heal["per_host"]:  # the self-heal agent: a program the role copies, its config and unit from the plan
        directories.append(_directory(heal["program"].rsplit("/", 1)[0], "engine"))
        files += [_file(heal["program"], None, "engine"),  # run by python3 (the unit says so), not executable
                  _file(heal["config"], f"{host}/self-heal/{SELF_HEAL_CONFIG}", "engine"),
                  _file(unit_path(SELF_HEAL_UNIT), f"{host}/systemd/{SELF_HEAL_UNIT}", "engine")]
        # First: stop.yml and uninstall stop units in this order, and the agent must not restart what they stop.
        units.insert(0, {"name": SELF_HEAL_UNIT, "component": "engine"})
    exporter = plan.get("gpu_metrics", {"per_host": {}})
    if host in exporter["per_host"]:  # the GPU health exporter: the same three parts as the agent's
        directories.append(_directory(exporter["program"].rsplit("/", 1)[0], "engine"))
        files += [_file(exporter["program"], None, "engine"),
                  _file(exporter["config"], f"{host}/gpu-metrics/{GPU_METRICS_CONFIG}", "engine"),
                  _file(unit_path(GPU_METRICS_UNIT), f"{host}/systemd/{GPU_METRICS_UNIT}", "engine")]
        units.append({"name": GPU_METRICS_UNIT, "component": "engine"})
    venvs = [plan["backend"]["venv"]]
    files.append(_sysctl(host))
    return {"accounts": [_account("engine", ENGINE_ACCOUNT)], "directories": directories, "files": files,
            "units": units, "venvs": venvs}


def _router_part(plan: dict, host: str) -> dict:
    return {
        "accounts": [_account("router", ROUTER_ACCOUNT)],
        "directories": [_directory(ROUTER_STATE_DIR, "router"), _home("router", ROUTER_ACCOUNT)],
        "files": [_file(unit_path(ROUTER_UNIT), f"{host}/systemd/{ROUTER_UNIT}", "router"),
                  _file(ROUTER_SHAPE, f"{host}/router/argv-shape.json", "router")],
        "units": [{"name": ROUTER_UNIT, "component": "router"}],
        "venvs": [plan["router"]["venv"]],
    }


def _frontdoor_part(plan: dict, host: str) -> dict:
    frontdoor = plan["router"]["frontdoor"]
    # nginx's workers read the key map and the TLS key through the group they run as: the distribution's.
    web_group = plan["platforms"][plan["host_platforms"][host]]["web_group"]
    return {
        "accounts": [],
        "directories": [_directory(frontdoor["directory"], "frontdoor", group=web_group, mode="0750")],
        "files": [
            _file(frontdoor["config"], f"{host}/frontdoor/vllm-omni.conf", "frontdoor"),
            *([_file(frontdoor["api_keys"], None, "frontdoor", group=web_group, mode="0640", secrets=True)]
              if frontdoor["api_keys"] else []),
            _file(frontdoor["certificate"], None, "frontdoor"),
            _file(frontdoor["certificate_key"], None, "frontdoor", group=web_group, mode="0640", secrets=True),
            *([_file(frontdoor["ca"], None, "frontdoor")] if frontdoor["ca"] else []),
            _file(frontdoor["metrics"], None, "frontdoor"),
        ],
        "units": [],
        "venvs": [],
    }


def _master_part(plan: dict, host: str) -> dict:
    return {
        "accounts": [_account("mooncake_master", MASTER_ACCOUNT)],
        "directories": [_home("mooncake_master", MASTER_ACCOUNT)],
        "files": [_file(unit_path(MASTER_UNIT), f"{host}/systemd/{MASTER_UNIT}", "mooncake_master"), _sysctl(host)],
        "units": [{"name": MASTER_UNIT, "component": "mooncake_master"}],
        "venvs": [plan["mooncake_master"]["venv"]],
    }


def _firewall_part(plan: dict, host: str) -> dict:
    firewall = plan["firewall"]
    files = [_file(firewall["peers_file"], "firewall/peers.nft", "firewall"),  # first: the ruleset includes it
             _file(unit_path(FIREWALL_UNIT), f"{host}/systemd/{FIREWALL_UNIT}", "firewall"),
             _file(firewall["ruleset_file"], f"{host}/firewall.nft", "firewall"),
             _file(NFTABLES_DROPIN, f"{host}/systemd/nftables.service.d/50-vllm-omni.conf", "firewall")]
    directories = [_directory(FIREWALL_DIR, "firewall", remove="if_empty"),
                   _directory(NFTABLES_DROPIN.rsplit("/", 1)[0], "firewall", remove="if_empty")]
    return {"accounts": [], "directories": directories, "files": files,
            "units": [{"name": FIREWALL_UNIT, "component": "firewall"}], "venvs": []}


def _monitoring_part(plan: dict, host: str) -> dict:
    targets = [_file(f"{PROMETHEUS_TARGETS_DIR}/{name}", f"prometheus/targets/{name}", "monitoring")
               for name in plan["monitoring"]["target_files"]]
    return {
        "accounts": [],
        "directories": [_directory(PROMETHEUS_TARGETS_DIR, "monitoring")],
        # The package's own files: written by us, left in place (package defaults would be gone anyway).
        "files": [_file(PROMETHEUS_RULES, "prometheus/rules.yml", "monitoring"),  # before the config that loads it
                  _file(PROMETHEUS_CONFIG, f"{host}/prometheus/prometheus.yml", "monitoring"),
                  _file(PROMETHEUS_DEFAULTS, f"{host}/prometheus/defaults", "monitoring"), *targets],
        "units": [],
        "venvs": [],
    }


def _artifacts_part(plan: dict, host: str) -> dict:
    """Wheel sets (removed with the host) and the staged model (kept, like the rest of HF_HOME)."""
    section = plan["artifacts"]
    mine = [a for a in section["items"] if a["id"] in section["per_host"][host]["artifacts"]]
    directories = [_directory(HOST_WHEELHOUSE.rsplit("/", 1)[0], "artifacts"), _directory(HOST_WHEELHOUSE, "artifacts"),
                   _directory(ARTIFACT_MANIFEST_DIR, "artifacts")]
    files = [_file(f"{ARTIFACT_MANIFEST_DIR}/{a['id']}.json", None, "artifacts") for a in mine]
    for artifact in mine:
        if artifact["kind"] == "wheels":
            directories.append(_directory(artifact["host_dir"], "artifacts"))
        else:
            directories.append(_directory(artifact["host_dir"], "artifacts", remove="never"))
            files.append(_file(artifact["ref_file"], None, "artifacts"))
    if section["per_host"][host]["serves"]:
        files.append(_file(ARTIFACT_CONFIG, f"{host}/artifacts/rsyncd.conf", "artifacts"))
    return {"accounts": [], "directories": directories, "files": files, "units": [], "venvs": []}


def _merge(parts: list[dict]) -> dict:
    merged: dict = {"accounts": [], "directories": [], "files": [], "units": [], "venvs": []}
    for part in parts:
        for key in merged:
            for item in part[key]:
                if item not in merged[key]:
                    merged[key].append(item)
    return merged


def host_footprint(plan: dict, host: str) -> dict:
    """What a deploy creates on ``host``: accounts, directories, files, units, venvs; and what stays."""
    parts = []
    if host in plan["hosts"] and plan["hosts"][host]["pipelines"]:
        parts.append(_engine_part(plan, host))
    if host in plan["router"]["per_host"]:
        parts.append(_router_part(plan, host))
        if plan["router"]["frontdoor"]["enabled"]:
            parts.append(_frontdoor_part(plan, host))
    if plan["mooncake_master"]["enabled"] and host in plan["mooncake_master"]["per_host"]:
        parts.append(_master_part(plan, host))
    if plan["firewall"]["enabled"] and host in plan["firewall"]["per_host"]:
        parts.append(_firewall_part(plan, host))
    if plan["monitoring"]["enabled"] and host in plan["monitoring"]["per_host"]:
        parts.append(_monitoring_part(plan, host))
    if host in plan["artifacts"]["per_host"]:
        parts.append(_artifacts_part(plan, host))
    footprint = _merge(parts)
    if footprint["venvs"]:
        footprint["venvs"].append(plan["paths"]["tools_venv"])
        footprint["directories"].append(_directory(plan["paths"]["install_root"], "venvs"))
    footprint["directories"].append(_directory(STATE_DIR, "record"))
    footprint["kept"] = [d["path"] for d in footprint["directories"] if d["remove"] == "never"]
    return footprint


def footprints(plan: dict) -> dict[str, dict]:
    """``plan["footprint"]``: every host of the plan (engine, router, master, monitoring, firewall peers)."""
    hosts = set(plan["hosts"]) | set(plan["router"]["per_host"]) | set(plan["monitoring"].get("per_host", {}))
    hosts |= set(plan["mooncake_master"].get("per_host", {}))
    return {host: host_footprint(plan, host) for host in sorted(hosts)}


# --- what to take away --------------------------------------------------------------------------

EMPTY = {"accounts": [], "directories": [], "files": [], "units": [], "venvs": [], "kept": []}


def _deepest_first(directories: list[dict]) -> list[dict]:
    return sorted(directories, key=lambda d: (-d["path"].count("/"), d["path"]))


def stale(recorded: dict | None, current: dict | None, components: list[str] | None = None) -> dict:
    """What an earlier deploy created on a host that the plan no longer has (prune).

    ``recorded`` is the host's footprint record (None: nothing recorded), ``current`` the plan's
    footprint for the host (None: the host has no part in the plan any more). ``components``
    restricts the answer to those components (the engine role prunes its pipelines before it
    restarts anything; the rest waits for the end of the deploy). Directories come deepest first;
    kept directories (the model cache) are never stale.
    """
    recorded, current = recorded or EMPTY, current or EMPTY

    def wanted(item: dict) -> bool:
        return components is None or item.get("component") in components

    keys = {"units": "name", "files": "path", "directories": "path", "accounts": "user"}
    result = {}
    for section, key in keys.items():
        present = {item[key] for item in current[section]}
        result[section] = [item for item in recorded[section]
                           if item[key] not in present and wanted(item) and item.get("remove") != "never"]
    result["directories"] = _deepest_first(result["directories"])
    result["venvs"] = [v for v in recorded["venvs"] if v not in current["venvs"]] if components is None else []
    return result


def everything(recorded: dict | None, current: dict | None, purge: bool = False) -> dict:
    """Uninstall: the union of what was recorded and what the plan says, kept directories only when ``purge``."""
    recorded, current = recorded or EMPTY, current or EMPTY
    merged = _merge([recorded, current])
    directories = [d for d in merged["directories"] if purge or d["remove"] != "never"]
    # Without purge the model cache and the service accounts' homes (their caches) stay.
    kept = [] if purge else sorted({d["path"] for d in merged["directories"] if d["remove"] == "never"}
                                   | {a["home"] for a in merged["accounts"]})
    return {**merged, "directories": _deepest_first(directories), "kept": kept}
