# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Every name and path the collection creates on a host, and each host's footprint.

This module owns unit names, unit file paths, service accounts and their homes, and the fixed
paths (kernel settings, firewall ruleset, Prometheus files, the installed-footprint record). The
paths under the operator's roots (``vllm_omni_install_root``, ``vllm_omni_config_root``,
``vllm_omni_hf_home``) come from the settings; the planner puts all of them in ``plan["paths"]``.

A host's footprint (``plan["footprint"][host]``) lists what a deploy creates there: accounts,
directories, files (each with the render-directory key whose text it receives), units and venvs,
plus what uninstall keeps. Roles install from it, ``stop``/``uninstall``/``status`` loop over it,
and deploy records it on the host (``paths.footprint_record``) so the next run can prune what the
plan no longer has without globbing for units.
"""

from __future__ import annotations

SYSTEMD_UNIT_DIR = "/etc/systemd/system"
# Every pipeline is an instance of this template unit, with its own drop-in.
ENGINE_UNIT_TEMPLATE = "vllm-omni@.service"
PIPELINE_DROPIN = "10-pipeline.conf"  # <unit>.d/10-pipeline.conf: EnvironmentFile + exact ExecStart
ROUTER_UNIT = "vllm-omni-router.service"
MASTER_UNIT = "mooncake-master.service"
FIREWALL_UNIT = "vllm-omni-firewall.service"
NFTABLES_DROPIN = f"{SYSTEMD_UNIT_DIR}/nftables.service.d/50-vllm-omni.conf"  # our table back after a flush
PROMETHEUS_UNIT = "prometheus.service"  # the distribution's (Debian, EPEL); the monitoring role configures it
FRONTDOOR_UNIT = "nginx.service"  # the distribution's; the frontdoor role adds our site to it
# Units whose processes are the deployment's own (not foreign load) for GPU discovery and preflight.
# nginx is not among them: it is ours only where the host's footprint record holds our front door
# (roles/preflight), so someone else's nginx on the router's port is still caught.
OWN_UNITS = [ENGINE_UNIT_TEMPLATE, ROUTER_UNIT, MASTER_UNIT, PROMETHEUS_UNIT]

# Service accounts: (user, group, home). Each runs its services only; none can log in.
ENGINE_ACCOUNT = ("vllm-omni", "vllm-omni", "/var/lib/vllm-omni")  # home: caches (vLLM, Triton, torch), cwd
ROUTER_ACCOUNT = ("vllm-omni-router", "vllm-omni-router", "/var/lib/vllm-omni-router")
MASTER_ACCOUNT = ("mooncake", "mooncake", "/var/lib/mooncake")
ENGINE_HOME = ENGINE_ACCOUNT[2]

MOONCAKE_SYSCTL = "/etc/sysctl.d/60-vllm-omni-mooncake.conf"
# Not under the config root: that directory belongs to the engine user's group (0750).
FIREWALL_DIR = "/etc/nftables.d"
ROUTER_STATE_DIR = "/etc/vllm-omni-router"
ROUTER_SHAPE = f"{ROUTER_STATE_DIR}/argv-shape.json"  # the router's argv without workers: a change restarts it
# The TLS front door (nginx) on router hosts: its site file, and our own directory for the key map and TLS.
FRONTDOOR_CONFIG = "/etc/nginx/conf.d/vllm-omni.conf"
FRONTDOOR_DIR = "/etc/nginx/vllm-omni"
FRONTDOOR_API_KEYS = f"{FRONTDOOR_DIR}/api-keys.map"  # "Bearer <key>" 1; 0640 root:<nginx's group>, host only
FRONTDOOR_CERT = f"{FRONTDOOR_DIR}/server.pem"
FRONTDOOR_CERT_KEY = f"{FRONTDOOR_DIR}/server.key"
FRONTDOOR_CA = f"{FRONTDOOR_DIR}/ca.pem"  # the CA clients trust (the collection's own, or the operator's chain)
# The served certificate's expiry as a Prometheus gauge (written by the frontdoor role, served at the door's /metrics).
FRONTDOOR_METRICS = f"{FRONTDOOR_DIR}/metrics.prom"
FRONTDOOR_ACCESS_LOG = "/var/log/nginx/vllm-omni.access.log"
NGINX_DEFAULT_SITE = "/etc/nginx/sites-enabled/default"  # Debian's package: a welcome page on port 80
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"  # Debian's and EPEL's package alike
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"  # ARGS= of the packaged unit
PROMETHEUS_TARGETS_DIR = "/etc/prometheus/vllm-omni"
PROMETHEUS_RULES = "/etc/prometheus/vllm-omni.rules.yml"  # the plan's alert rules (prometheus.yml loads them)
# Wheel sets on the hosts, one directory each (plan["artifacts"]): kept, so a host serves the next one and a
# re-run transfers nothing; prune takes away the sets the plan no longer has.
HOST_WHEELHOUSE = "/var/cache/vllm-omni/wheelhouse"
# What the last deploy created on a host (its footprint): prune and uninstall read it.
STATE_DIR = "/var/lib/vllm-omni-serve"
FOOTPRINT_RECORD = f"{STATE_DIR}/footprint.json"
# Artifact distribution (_artifacts): the manifests each host checks its artifacts against, and the rsync
# daemon that serves them to the next hosts while a deploy distributes them (a transient unit, not a file).
ARTIFACT_MANIFEST_DIR = f"{STATE_DIR}/artifacts"
ARTIFACT_CONFIG = f"{STATE_DIR}/rsyncd.conf"
ARTIFACT_UNIT = "vllm-omni-artifacts.service"


def pipeline_unit(name: str) -> str:
    return f"vllm-omni@{name}.service"


def unit_path(unit: str) -> str:
    return f"{SYSTEMD_UNIT_DIR}/{unit}"


def dropin_path(unit: str) -> str:
    return f"{SYSTEMD_UNIT_DIR}/{unit}.d/{PIPELINE_DROPIN}"


def fixed_paths(settings: dict) -> dict:
    """``plan["paths"]``: every path a role or playbook uses, from the settings and the constants above."""
    root = settings["vllm_omni_install_root"]
    return {
        "install_root": root,
        "unit_dir": SYSTEMD_UNIT_DIR,
        "engine_home": ENGINE_HOME,
        "engine_unit_template": unit_path(ENGINE_UNIT_TEMPLATE),
        "config_root": settings["vllm_omni_config_root"],
        "hf_home": settings["vllm_omni_hf_home"],
        "tools_venv": f"{root}/tools",  # uv, installed from the wheelhouse
        "host_wheelhouse": HOST_WHEELHOUSE,
        "mooncake_sysctl": MOONCAKE_SYSCTL,
        "footprint_record": FOOTPRINT_RECORD,
        "own_units": list(OWN_UNITS),
    }


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
