# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Every name and path the collection uses: unit names, unit file paths, service accounts and their homes,
the fixed paths on a host (kernel settings, firewall, Prometheus, the footprint record), the paths under the
operator's roots (venvs, pipeline config directories) and the controller's cache.

Nothing else spells one of these: the planner puts them in the plan (``plan["paths"]``, each section's
``unit``/``*_file``), the roles and playbooks read them from there.
"""

from __future__ import annotations

import os
from pathlib import Path

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
OWN_UNITS = [ENGINE_UNIT_TEMPLATE, ROUTER_UNIT, MASTER_UNIT, PROMETHEUS_UNIT, "vllm-omni-heal.service"]

# Service accounts: (user, group, home). Each runs its services only; none can log in.
ENGINE_ACCOUNT = ("vllm-omni", "vllm-omni", "/var/lib/vllm-omni")  # home: caches (vLLM, Triton, torch), cwd
ROUTER_ACCOUNT = ("vllm-omni-router", "vllm-omni-router", "/var/lib/vllm-omni-router")
MASTER_ACCOUNT = ("mooncake", "mooncake", "/var/lib/mooncake")
ENGINE_HOME = ENGINE_ACCOUNT[2]
# The engines' compile caches (vLLM's torch.compile artifacts, Inductor's, Triton's), one directory per engine
# version: kept across restarts and rolls of that version; the footprint's prune drops the directory of a
# version no pipeline runs any more. Not in /tmp, which the units' PrivateTmp empties at every start.
COMPILE_CACHE_ROOT = f"{ENGINE_HOME}/compile-cache"
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
ANSWER_REFERENCES = f"{STATE_DIR}/answers.json"  # the answer check's reference answers (modules/answer_reference.py)
CONVERGE_RECORD = f"{STATE_DIR}/converge.json"  # the last whole deploy's digest and snapshot (no-op check), 0600
# Artifact distribution (_artifacts): the manifests each host checks its artifacts against, and the rsync
# daemon that serves them to the next hosts while a deploy distributes them (a transient unit, not a file).
ARTIFACT_MANIFEST_DIR = f"{STATE_DIR}/artifacts"
ARTIFACT_CONFIG = f"{STATE_DIR}/rsyncd.conf"
ARTIFACT_UNIT = "vllm-omni-artifacts.service"
# The self-heal agent on every engine host (roles/engine/files/vllm_omni_heal.py; plan/_self_heal.py).
SELF_HEAL_UNIT = "vllm-omni-heal.service"
SELF_HEAL_PROGRAM = "self-heal/vllm_omni_heal.py"  # under the install root
SELF_HEAL_CONFIG = "self-heal.json"  # under the config root
SELF_HEAL_STATE = f"{STATE_DIR}/self-heal.json"  # what it watches and did (the status playbook reads it)
SELF_HEAL_PAUSE = f"{STATE_DIR}/self-heal-pause"  # a deploy's pause: the Unix time it expires at
# The GPU health exporter on every engine host (roles/engine/files/vllm_omni_gpu_metrics.py; plan/_gpu_metrics.py).
GPU_METRICS_UNIT = "vllm-omni-gpu-metrics.service"
GPU_METRICS_PROGRAM = "gpu-metrics/vllm_omni_gpu_metrics.py"  # under the install root
GPU_METRICS_CONFIG = "gpu-metrics.json"  # under the config root

# Where each HTTP service answers what. The plan's URLs are whole (``health_url``, ``readiness_url``,
# ``metrics_url``, ...): roles and playbooks append nothing.
HEALTH_PATH = "/health"  # vLLM's API server, the simulator, mooncake_master: 200 once it serves
READINESS_PATH = "/readiness"  # vllm-router: 200 with at least one healthy worker (its /health wants all)
METRICS_PATH = "/metrics"  # Prometheus text: the engines, the router, the master, the front door
PROMETHEUS_READY_PATH = "/-/ready"  # Prometheus itself, once its configuration is loaded


def http_url(ip: str, port: int, path: str = "", scheme: str = "http") -> str:
    return f"{scheme}://{ip}:{port}{path}"


def pipeline_unit(name: str) -> str:
    return f"vllm-omni@{name}.service"


def unit_path(unit: str) -> str:
    return f"{SYSTEMD_UNIT_DIR}/{unit}"


def dropin_path(unit: str) -> str:
    return f"{SYSTEMD_UNIT_DIR}/{unit}.d/{PIPELINE_DROPIN}"


# The firewall's files. Not under the config root: that directory belongs to the engine user's group (0750).
RULESET_FILE = f"{FIREWALL_DIR}/vllm-omni.nft"
# The deployment's peer set, the same on every host; each RULESET_FILE includes it.
PEERS_FILE = f"{FIREWALL_DIR}/vllm-omni-peers.nft"


def compile_cache_dir(version: str) -> str:
    """One engine version's compile caches (see COMPILE_CACHE_ROOT)."""
    return f"{COMPILE_CACHE_ROOT}/vllm-omni-{version}"


def venv_dir(install_root: str, name: str) -> str:
    """A venv under the install root: ``<root>/venvs/<name>-<version>`` (engines, simulator, router, master)."""
    return f"{install_root}/venvs/{name}"


def cache_root(environ=None) -> Path:
    """The controller's cache (``$VLLM_OMNI_CACHE``, else ``~/.cache/vllm-omni-serve``): discovery, TLS, tools."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("VLLM_OMNI_CACHE") or Path(environ.get("HOME", "/root")) / ".cache" / "vllm-omni-serve")


def controller_cache_path(*parts: str, environ=None) -> Path:
    """A path in the controller's cache: ``parts`` relative to it (the plan's layout); ValueError for a part that
    would lead out of it (absolute, or ``..``)."""
    for part in parts:
        if not part or part.startswith("/") or ".." in Path(part).parts:
            raise ValueError(f"{part!r} is not a relative path inside the controller cache")
    return cache_root(environ).joinpath(*parts)


def tls_dir(environ=None) -> Path:
    """The front door's TLS material made by the collection, on the controller: one CA per controller cache
    (``tls/ca.pem``: clients trust it once), one certificate per router host and address (``<host>-<ip>.pem``)."""
    return cache_root(environ) / "tls"


# The controller cache's layout, relative to cache_root() (the plan's ``artifacts.controller`` and each
# artifact's ``controller_dir``/``controller_manifest``; the artifacts role joins them to its cache directory).
CONTROLLER_WHEELHOUSE = "wheelhouse"  # one wheel set per lock and host platform
CONTROLLER_MODELS = "models"  # hub models fetched for distribution
CONTROLLER_ARTIFACTS = "artifacts"  # every artifact's manifest, and the controller's rsync daemon while it serves
CONTROLLER_DISCOVERY = "discovery"  # discovery/<host>.json: what each host's last discovery found (--limit)
CONTROLLER_REPORTS = "reports"  # reports/<deployment_id>/: status.json, preflight/<host>.json, bench runs


def controller_layout() -> dict:
    daemon = CONTROLLER_ARTIFACTS
    return {"directories": [CONTROLLER_WHEELHOUSE, CONTROLLER_MODELS, CONTROLLER_ARTIFACTS],
            "daemon_dir": daemon, "daemon_config": f"{daemon}/rsyncd.conf", "daemon_pid": f"{daemon}/rsyncd.pid",
            "daemon_log": f"{daemon}/rsyncd.log", "reports_dir": CONTROLLER_REPORTS}


def tls_stem(host: str, ip: str) -> str:
    return f"{host}-{ip}"


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
        "converge_record": CONVERGE_RECORD,
        "answer_references": ANSWER_REFERENCES,
        "own_units": list(OWN_UNITS),
    }


# A pipeline's files in its config directory (<config root>/<pipeline>/), and in its render directory.
STAGE_CONFIG_FILE = "stage_config.yaml"
ENV_FILE = "engine.env"


def pipeline_paths(config_root: str, name: str, venv: str) -> dict[str, str]:
    """A pipeline's ``paths``: its config directory and files, its unit drop-in, its venv."""
    config_dir = f"{config_root}/{name}"
    return {
        "config_dir": config_dir,
        "stage_config": f"{config_dir}/{STAGE_CONFIG_FILE}",
        "env_file": f"{config_dir}/{ENV_FILE}",
        # The files a rolling upgrade replaces, kept here until the new ones serve (roles/upgrade).
        "previous_dir": f"{config_dir}/.previous",
        "unit_dropin": dropin_path(pipeline_unit(name)),
        "venv": venv,
    }
