# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The deployment-wide checks: every setting that is one value for all hosts, and what follows from them.

Setting names (unknown, misspelled, removed), the deployment settings (one value on every engine
host), the engine version against the layout, per-stage overrides, the GPU memory the stages of
one GPU claim together, and the environment users may add. Checks add to a ``Problems``
collector and go on, so one run reports every problem; ``deployment`` runs them in the order their
problems are reported and returns the ``Deployment`` every host and pipeline is planned in.
The checks of one host's own values (address, GPUs, pipeline count, ports) live in ``_hosts`` and
``_ports``.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import re
from typing import Any

from ..host import _engine_data, _names
from ..host._engine_data import EngineVersion
from . import _artifacts
from ._hosts import ENGINE_GROUP
from ._pipelines import OWNED_ENV, Deployment, stage_layout
from ._problems import ALL_HOSTS, Problems, host_where
from ._settings import BY_NAME, COMPUTED_FACTS, DEPLOYMENT, REMOVED_SETTINGS, SETTINGS, SettingError, inside, show
from ._stages import (
    ENGINE_ARGS,
    GPU_MEMORY_BUDGET,
    MODEL_STAGE,
    OWNED_ENGINE_ARGS,
    OWNED_SAMPLING_PARAMS,
    ROLE_ALIASES,
    SAMPLING_PARAMS,
    SHARED_GPU_MEMORY,
    layout_roles,
)

# (setting, the override kind it fills, overridable keys -> checker, keys the planner owns -> the setting to use)
OVERRIDE_KINDS = (
    ("vllm_omni_stage_engine_args", "engine_args", ENGINE_ARGS, OWNED_ENGINE_ARGS),
    ("vllm_omni_stage_sampling_params", "sampling", SAMPLING_PARAMS, OWNED_SAMPLING_PARAMS),
)
# Stands for an override value that was refused (a problem says why): no checked value can be it.
_REFUSED = object()


@functools.lru_cache(maxsize=1024)  # every host carries the same names (ansible_host, ...)
def _close_match(name: str, cutoff: float) -> str | None:
    guess = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=cutoff)
    return guess[0] if guess else None


def _indirection(name: str) -> bool:
    """``vault_vllm_omni_api_key`` and the like: a variable a setting's value refers to, not a misspelling."""
    return any(name.endswith("_" + setting) for setting in BY_NAME)


def check_names(host: str, variables: dict, problems: Problems) -> None:
    """Unknown, misspelled (also by case only) and removed settings."""
    for name in variables:
        if name in BY_NAME or name in COMPUTED_FACTS or _indirection(name):
            continue
        lowered = [setting for setting in BY_NAME if setting == name.lower()]
        if lowered:
            problems.add(host_where(host), name, "differs from a setting only in case; Ansible variable names are "
                         "case-sensitive, so it would be ignored", f"write {lowered[0]}")
            continue
        if name in REMOVED_SETTINGS:
            problems.add(host_where(host), name, f"was removed: {REMOVED_SETTINGS[name]}")
            continue
        if name.startswith("vllm_omni_"):
            guess = _close_match(name, 0.6)
            fix = f"did you mean {guess}?" if guess else "see docs/variables.md for the settings"
            problems.add(host_where(host), name, "is not a setting of vllm_omni.serve", fix)
            continue
        guess = _close_match(name, 0.85)
        if guess:
            problems.add(host_where(host), name, "looks like a misspelled setting", f"did you mean {guess}?")


def deployment_settings(engine_hosts: list[str], hostvars: dict, problems: Problems) -> tuple[dict, dict]:
    """(value, source) of every deployment setting: its default, or the one value every engine host sets."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        if setting.scope != DEPLOYMENT:
            continue
        seen = {host: hostvars[host][setting.name] for host in engine_hosts if setting.name in hostvars[host]}
        if not seen:
            values[setting.name] = setting.default
            sources[setting.name] = "default"
            continue
        if len(seen) != len(engine_hosts):
            missing = [h for h in engine_hosts if h not in seen]
            problems.add(ALL_HOSTS, setting.name,
                         f"is set on some hosts but not on {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}; it is one value for the whole deployment",
                         f"set it once in group_vars/{ENGINE_GROUP}.yml")
            continue
        first = next(iter(seen.values()))
        same = all(type(v) is type(first) and v == first for v in seen.values())
        distinct = {} if same else {show(v): h for h, v in seen.items()}
        if len(distinct) > 1:
            examples = ", ".join(f"{h}: {v}" for v, h in list(distinct.items())[:3])
            problems.add(ALL_HOSTS, setting.name,
                         f"differs between hosts ({examples}); it is one value for the whole deployment",
                         f"set it once in group_vars/{ENGINE_GROUP}.yml and remove the host_vars copies")
            continue
        raw = next(iter(seen.values()))
        try:
            values[setting.name] = setting.validate(raw)
            sources[setting.name] = "inventory"
        except SettingError as error:
            problems.setting(ALL_HOSTS, setting.name, error)
    return values, sources


# Host settings only an engine host reads (GPUs, pipeline count); a service-only host's vllm_omni_ip is read.
ENGINE_HOST_SETTINGS = ("vllm_omni_gpus", "vllm_omni_pipelines_per_host", "vllm_omni_span_group")


def check_service_host_settings(service_hosts: list[str], hostvars: dict, settings: dict,
                                problems: Problems) -> list[str]:
    """Settings on hosts that run services but no pipeline; returns warnings.

    Deployment settings are read from the engine hosts: a router-only host that sets one to another
    value (``host_vars/edge.yml: vllm_omni_router_port: 9000``) would be ignored without a word, so it is
    refused. The same value (``group_vars/all``) is fine. Engine-host settings there are only warned about.
    """
    warnings = []
    for host in service_hosts:
        variables = hostvars.get(host, {})
        for setting in SETTINGS:
            if setting.scope != DEPLOYMENT or setting.name not in variables:
                continue
            try:
                value = setting.validate(variables[setting.name])
            except SettingError as error:
                problems.setting(host_where(host), setting.name, error)
                continue
            if value != settings[setting.name]:
                problems.add(host_where(host), setting.name,
                             f"is {show(value)} here, but deployment settings are read from the engine hosts "
                             f"(group {ENGINE_GROUP}), where it is {show(settings[setting.name])}: this value would "
                             "be ignored", f"set it once for the deployment (group_vars/all.yml or group_vars/"
                             f"{ENGINE_GROUP}.yml) and remove it from {host}'s variables")
        unread = [name for name in ENGINE_HOST_SETTINGS if name in variables]
        if unread:
            warnings.append(f"host {host} runs no pipeline, so {', '.join(unread)} is not read there")
    return warnings


def deployment(settings: dict, sources: dict, problems: Problems) -> Deployment:
    """The deployment-wide checks that need valid deployment settings, and the context they establish."""
    engine = check_version_layout(settings, problems)
    check_extra_env(settings, problems)
    layout = settings["vllm_omni_layout"]
    overrides = stage_overrides(settings, layout, problems)
    overrides, planner_shares = shared_gpu_split(settings, layout, overrides)
    context = Deployment(settings, sources, engine, overrides, planner_shares)
    if engine is not None:
        check_gpu_memory(context, problems)
        check_engine_rules(context, problems)
    check_rdma_devices(settings, problems)
    check_roots(settings, problems)
    check_tls(settings, problems)
    _artifacts.check_model_source(settings, problems)
    if not check_replicas(context, problems):
        problems.raise_if_any()  # every host's processes and ports would follow from counts that cannot be
    return context


# Flags of vLLM-Omni's stage-based runtime that distributed pipelines use (headless comes from vLLM).
DISTRIBUTED_FLAGS = ("--stage-id", "--omni-master-address", "--omni-master-port", "--omni-replica-address",
                     "--omni-lb-policy")


def check_replicas(context: Deployment, problems: Problems) -> bool:
    """xPyD replicas only where a pipeline's engines can run as processes of their own; False after a problem."""
    settings = context.settings
    asked = [name for name in ("vllm_omni_prefill_replicas", "vllm_omni_decode_replicas") if settings[name] > 1]
    if not asked:
        return True
    before = len(problems)
    name = asked[0]
    if settings["vllm_omni_layout"] != "pd":
        problems.add(ALL_HOSTS, name, f"is {settings[name]}, but vllm_omni_layout is {settings['vllm_omni_layout']}: "
                     "replicas are prefill and decode engines", "set vllm_omni_layout: pd, or remove the replica counts")
    elif settings["vllm_omni_audio_output"]:
        problems.add(ALL_HOSTS, name, f"is {settings[name]}, which runs each engine as a process of its own, but "
                     "vllm_omni_audio_output is true: vLLM-Omni 0.26 hands decode's output to the talker through host "
                     "shared memory, which does not reach another process's stage",
                     "set vllm_omni_audio_output: false (text out), or keep one prefill and one decode engine")
    elif settings["vllm_omni_share_gpus"]:
        problems.add(ALL_HOSTS, name, f"is {settings[name]}, but vllm_omni_share_gpus puts every stage on one GPU "
                     "group of one process", "set vllm_omni_share_gpus: false, or keep one engine per stage")
    elif context.engine is not None:
        missing = [flag for flag in DISTRIBUTED_FLAGS if flag not in context.engine.serve_flags]
        if missing:
            problems.add(ALL_HOSTS, name, f"needs vLLM-Omni's stage-based runtime, and {context.engine.version} "
                         f"has no {', '.join(missing)}", "use a version with it (README, Support matrix), or keep one "
                         "engine per stage")
    return len(problems) == before


def check_tls(settings: dict, problems: Problems) -> None:
    cert, key = settings["vllm_omni_tls_cert_file"], settings["vllm_omni_tls_key_file"]
    if (cert is None) != (key is None):
        given, missing = ("vllm_omni_tls_cert_file", "vllm_omni_tls_key_file") if key is None else \
            ("vllm_omni_tls_key_file", "vllm_omni_tls_cert_file")
        problems.add(ALL_HOSTS, missing, f"is not set, but {given} is: the front door needs both",
                     f"set {missing} too, or neither (the collection then makes its own CA)")
    elif cert is not None and not settings["vllm_omni_frontdoor_enabled"]:
        problems.add(ALL_HOSTS, "vllm_omni_tls_cert_file", "is set, but vllm_omni_frontdoor_enabled is false, so "
                     "nothing would use it", "set vllm_omni_frontdoor_enabled: true, or remove the TLS settings")
    elif settings["vllm_omni_tls_ca_file"] is not None and cert is None:
        problems.add(ALL_HOSTS, "vllm_omni_tls_ca_file", "is set without vllm_omni_tls_cert_file: the collection's "
                     "own CA signs the certificates it makes", "set vllm_omni_tls_cert_file and vllm_omni_tls_key_file "
                     "too, or remove vllm_omni_tls_ca_file")


def check_roots(settings: dict, problems: Problems) -> None:
    """The three roots apart from each other and from the service accounts' homes and the state directory.

    A root inside the model cache or the engine user's home could be swapped by that user, and root
    runs what is in it (the venv's python); the model cache inside another root would go with
    uninstall, which keeps it; a root holding a service home would take that home along.
    """
    roots = {name: settings[name] for name in ("vllm_omni_install_root", "vllm_omni_config_root", "vllm_omni_hf_home")}
    owned = {"the engine user's home": _names.ENGINE_HOME, "the router user's home": _names.ROUTER_ACCOUNT[2],
             "the Mooncake master user's home": _names.MASTER_ACCOUNT[2],
             "the collection's state directory": _names.STATE_DIR}
    names = list(roots)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            a, b = roots[first], roots[second]
            if inside(a, b) or inside(b, a):
                problems.add(ALL_HOSTS, f"{first} / {second}", f"overlap ({a} and {b}): each root must be a tree "
                             "of its own (uninstall removes the install and config roots and keeps the model cache)",
                             f"move {second} out of {first}'s tree, e.g. /opt/vllm-omni, /etc/vllm-omni, "
                             "/var/lib/vllm-omni/hf")
    for name, path in roots.items():
        for what, other in owned.items():
            allowed = name == "vllm_omni_hf_home" and what == "the engine user's home"  # its cache, its data
            if not allowed and (inside(path, other) or inside(other, path)):
                problems.add(ALL_HOSTS, name, f"is {path}, which overlaps {what} ({other}): that user could replace "
                             "what root installs and runs there, or uninstall would take the home along",
                             f"choose a directory outside {other}")


def check_version_layout(settings: dict, problems: Problems) -> EngineVersion | None:
    """The engine version's data, when it runs the layout (and text-only pipelines where asked); None otherwise."""
    version = settings["vllm_omni_version"]
    table = _engine_data.support_table()
    if version not in table:
        problems.add(ALL_HOSTS, "vllm_omni_version",
                     f"is {show(version)}, which this collection has not been checked against",
                     f"use one of: {', '.join(_engine_data.supported_versions())}")
        return None
    engine = table[version]
    layout = settings["vllm_omni_layout"]
    if layout not in engine.layouts:
        with_layout = _engine_data.versions_with_layout(layout)
        problems.add(ALL_HOSTS, "vllm_omni_layout",
                     f"is {layout}, which vLLM-Omni {version} cannot run: {engine.pd_refused_because}",
                     f"set vllm_omni_version to {' or '.join(with_layout)} for {layout}, "
                     f"or vllm_omni_layout: {engine.layouts[0]}")
        return None
    connector = settings["vllm_omni_kv_connector"]
    if layout == "pd" and connector not in engine.kv_connectors:
        with_connector = [v for v in _engine_data.versions_with_layout("pd")
                          if connector in _engine_data.support_table()[v].kv_connectors]
        problems.add(ALL_HOSTS, "vllm_omni_kv_connector",
                     f"is {connector}, which the collection does not run with vLLM-Omni {version} "
                     f"(its PD connectors: {', '.join(sorted(engine.kv_connectors)) or 'none'})",
                     (f"set vllm_omni_version to {' or '.join(with_connector)} for {connector}, or " if with_connector
                      else "set ") + f"vllm_omni_kv_connector to one of: {', '.join(sorted(engine.kv_connectors))}")
        return None
    if not settings["vllm_omni_audio_output"] and engine.schema != "stage_args":
        problems.add(ALL_HOSTS, "vllm_omni_audio_output",
                     f"is false, but vLLM-Omni {version}'s stages: schema cannot drop the talker and code2wav stages "
                     "(its Qwen3-Omni pipeline is fixed in Python)",
                     f"set vllm_omni_version to {' or '.join(_engine_data.versions_with_schema('stage_args'))} "
                     "for text-only pipelines, or vllm_omni_audio_output: true")
        return None
    return engine


# Environment names that hold secrets: the secrets block of engine.env has its own (API key, HF token),
# and anything else secret-like would sit in a 0644 drop-in, plan.json and the render directory.
SECRET_ENV = frozenset({"VLLM_API_KEY", "XPYD_SIM_REQUIRE_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
SECRET_LIKE = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)($|_)")


def check_extra_env(settings: dict, problems: Problems) -> None:
    names = set(settings["vllm_omni_extra_env"])
    secret = sorted(names & SECRET_ENV)
    if secret:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(secret)}, which the collection writes only into each host's 0640 secrets block",
                     "remove it; set vllm_omni_api_key / engine_hf_token in Ansible Vault instead")
        return
    owned = sorted(names & OWNED_ENV)
    if owned:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(owned)}, which the planner computes per pipeline",
                     "remove them; see docs/variables.md (computed values) for the setting that controls each")
        return
    caches = sorted(names & MODEL_CACHE_ENV)
    if caches:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(caches)}, which moves where the engines look for model files away from "
                     f"vllm_omni_hf_home ({settings['vllm_omni_hf_home']}): staged weights would not be found "
                     "offline, and the engine unit may write only there",
                     "remove it; set vllm_omni_hf_home to move the model cache")
        return
    for name in sorted(names & LOADER_ENV):
        where = _writable_place(str(settings["vllm_omni_extra_env"][name]), settings)
        if where:
            problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                         f"{name} points into {where}: code or libraries loaded from there can be replaced by "
                         "whoever writes there, or the engine unit never sees them",
                         f"install what {name} loads into a directory root owns (e.g. under "
                         f"{settings['vllm_omni_install_root']}) and point {name} there, or remove it")
            return
    secret_like = sorted(name for name in names if SECRET_LIKE.search(name))
    if secret_like:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"{', '.join(secret_like)} looks like a secret, and extra_env lands in plan.json, the render "
                     "directory and every host's environment file",
                     "keep secrets out of vllm_omni_extra_env; the engines' API key and HF token have their own "
                     "vaulted settings (vllm_omni_api_key, engine_hf_token)")


# Environment that moves the model cache (HF_HOME is the planner's own, from vllm_omni_hf_home).
MODEL_CACHE_ENV = frozenset({"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_ASSETS_CACHE",
                             "HF_XET_CACHE", "HF_MODULES_CACHE", "VLLM_CACHE_ROOT", "VLLM_ASSETS_CACHE"})
# Environment that makes the engine's interpreter or loader run code from a directory.
LOADER_ENV = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX",
                        "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "VLLM_PLUGINS_PATH"})
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/user", "/home", "/root")  # noqa: S108 - refused places


def _writable_place(value: str, settings: dict) -> str | None:
    """The first place a search-path value names that the engine user (or anyone) writes, or the unit hides."""
    owned = {_names.ENGINE_HOME: "the engine user's home", settings["vllm_omni_hf_home"]: "the model cache "
             "(vllm_omni_hf_home), which the engine user writes"}
    for part in re.split(r"[: ]+", value):
        if not part:
            continue
        if not part.startswith("/"):
            return f"the relative path {show(part)} (resolved from the engine's working directory)"
        for tree in _WORLD_WRITABLE:
            if inside(part, tree):
                return f"{tree}, which anyone may write or the engine unit hides"
        for tree, what in owned.items():
            if inside(part, tree):
                return f"{tree}, {what}"
    return None


def check_fanout_address(settings: dict, ips: dict[str, str | None], problems: Problems) -> None:
    """The address hosts pull the first copy of each artifact from must be one they can reach."""
    address = settings["vllm_omni_artifact_controller_address"]
    if address is None:
        return
    parsed = ipaddress.ip_address(address)
    remote = sorted(h for h, ip in ips.items() if ip is not None and not ipaddress.ip_address(ip).is_loopback)
    if (parsed.is_loopback or parsed.is_link_local) and remote:
        kind = "loopback" if parsed.is_loopback else "link-local"
        problems.add(ALL_HOSTS, "vllm_omni_artifact_controller_address",
                     f"is the {kind} address {address}: {', '.join(remote[:3])}{' ...' if len(remote) > 3 else ''} "
                     "would pull the wheel sets and weights from themselves, not from the controller",
                     "set it to the controller's address on the network the hosts reach it on, or leave it unset "
                     "(the address the hosts see the controller's SSH connection come from)")


def no_effect_warnings(context: Deployment, groups: Any, ips: dict[str, str | None], hostvars: dict) -> list[str]:
    """Settings the inventory set that this deployment never reads, or that can never take effect."""
    settings, sources = context.settings, context.sources
    set_here = {name for name, source in sources.items() if source == "inventory"}
    warnings = []

    def unused(name: str, why: str) -> None:
        if name in set_here:
            warnings.append(f"{name} is set but has no effect: {why}")

    source = settings["vllm_omni_model_source"]
    if source == "none":
        unused("vllm_omni_model_revision", "vllm_omni_model_source is none (nothing is staged); set "
               "vllm_omni_model_source: hub to serve that revision")
    if source != "directory":
        unused("vllm_omni_model_directory", f"vllm_omni_model_source is {source}; set vllm_omni_model_source: "
               "directory to stage from it")
    if source != "hub" and any("vllm_omni_hf_token" in hostvars.get(h, {}) for h in groups.engine_hosts):
        warnings.append(f"vllm_omni_hf_token is set but has no effect: vllm_omni_model_source is {source}, and the "
                        "token is used only to fetch a hub source on the controller (it never reaches a host)")
    if context.layout != "pd":
        for name in (*MOONCAKE_SETTINGS, *NIXL_SETTINGS, "vllm_omni_kv_connector", "vllm_omni_prefill_replicas",
                     "vllm_omni_decode_replicas", "vllm_omni_kv_load_failure_policy"):
            unused(name, f"vllm_omni_layout is {context.layout}: there is no prefill-to-decode KV transfer")
    else:
        connector = settings["vllm_omni_kv_connector"]
        for name in NIXL_SETTINGS if connector == "mooncake" else MOONCAKE_SETTINGS:
            unused(name, f"vllm_omni_kv_connector is {connector}"
                   + ("" if connector == "mooncake" else " (NIXL's own lease frees unclaimed KV after 30 s, renewed "
                                                          "while decode pulls; UCX picks TCP or RDMA itself)"))
    if not (context.replicated or context.spanning):
        for name in ("vllm_omni_stage_master_port_base", "vllm_omni_stage_zmq_port_range",
                     "vllm_omni_stage_zmq_ports_per_process", "vllm_omni_replica_lb_policy"):
            unused(name, "no pipeline runs its engines as processes of their own (no replicas, no spanning)")
    if not settings["vllm_omni_monitoring_enabled"]:
        for name in ("vllm_omni_prometheus_port", "vllm_omni_monitoring_client_cidrs"):
            unused(name, "vllm_omni_monitoring_enabled is false")
    if not settings["vllm_omni_mooncake_master_enabled"]:
        for name in ("vllm_omni_mooncake_master_rpc_port", "vllm_omni_mooncake_master_metrics_port"):
            unused(name, "vllm_omni_mooncake_master_enabled is false")
    if not settings["vllm_omni_frontdoor_enabled"]:
        unused("vllm_omni_router_backend_port", "vllm_omni_frontdoor_enabled is false (vllm-router itself listens on "
               "vllm_omni_router_port)")
        unused("vllm_omni_alert_certificate_days", "vllm_omni_frontdoor_enabled is false (no certificate to watch)")
    if not settings["vllm_omni_firewall_enabled"]:
        for name in ("vllm_omni_router_client_cidrs", "vllm_omni_monitoring_client_cidrs"):
            unused(name, "vllm_omni_firewall_enabled is false, so no rule reads it (every address gets through)")
    routers = [h for h in groups.router_hosts if ips.get(h)]
    if settings["vllm_omni_router_client_cidrs"] and routers and all(
            ipaddress.ip_address(ips[h]).is_loopback for h in routers):
        warnings.append("vllm_omni_router_client_cidrs is set but has no effect: every router host's address is "
                        "loopback, so no client network can reach the router")
    for name in ("vllm_omni_router_client_cidrs", "vllm_omni_monitoring_client_cidrs"):
        networks = [ipaddress.ip_network(n) for n in settings[name]]
        for version, everything in ((4, "0.0.0.0/0"), (6, "::/0")):
            mine = [n for n in networks if n.version == version]
            if len(mine) > 1 and [str(n) for n in ipaddress.collapse_addresses(mine)] == [everything]:
                warnings.append(f"{name} lists {', '.join(map(str, mine))}, which together cover every IPv{version} "
                                "address: every address may reach that port")
    return warnings


# The settings only one KV connector reads (vllm_omni_kv_connector).
MOONCAKE_SETTINGS = ("vllm_omni_mooncake_protocol", "vllm_omni_mooncake_rdma_devices", "vllm_omni_bootstrap_port_base",
                     "vllm_omni_mooncake_rpc_port_range", "vllm_omni_mooncake_rpc_ports_per_pipeline",
                     "vllm_omni_mooncake_abort_timeout")
NIXL_SETTINGS = ("vllm_omni_nixl_side_channel_port_base", "vllm_omni_nixl_ucx_port_range",
                 "vllm_omni_nixl_ucx_ports_per_pipeline")


def check_rdma_devices(settings: dict, problems: Problems) -> None:
    if settings["vllm_omni_mooncake_rdma_devices"] and settings["vllm_omni_mooncake_protocol"] != "rdma":
        problems.add(ALL_HOSTS, "vllm_omni_mooncake_rdma_devices",
                     "is set but vllm_omni_mooncake_protocol is tcp, so the devices would be ignored",
                     "set vllm_omni_mooncake_protocol: rdma, or remove the device list")


# --- stage overrides ----------------------------------------------------------------------------


def stage_overrides(settings: dict, layout: str, problems: Problems) -> dict:
    """{role: {"engine_args": {...}, "sampling": {...}}}, validated against the layout."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    result: dict[str, dict] = {role: {"engine_args": {}, "sampling": {}} for role in roles}
    tp_requests: dict[str, Any] = {}
    for setting_name, kind, allowed, owned in OVERRIDE_KINDS:
        for stage, targets, values in _stage_entries(settings, setting_name, layout, problems):
            for key, value in sorted(values.items(), key=lambda item: str(item[0])):
                if key == "tensor_parallel_size" and kind == "engine_args":
                    for target in targets:
                        tp_requests[target] = value
                    continue
                checked = _override_value(f"{setting_name}.{stage}.{key}", key, value, allowed, owned, problems)
                if checked is _REFUSED:
                    continue
                for target in targets:
                    result[target][kind][key] = checked
    if tp_requests:
        _refuse_tp_requests(settings, layout, tp_requests, problems)
    return result


def _stage_entries(settings: dict, setting_name: str, layout: str, problems: Problems):
    """(stage, the roles it sets, its values) of each entry of an override setting that names a stage of the layout."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    aliases = ROLE_ALIASES.get(layout, {})
    # Aliases first so role-specific values win.
    ordered = sorted(settings[setting_name].items(), key=lambda item: (item[0] not in aliases, str(item[0])))
    for stage, values in ordered:
        if stage not in roles and stage not in aliases:
            valid = ", ".join(list(roles) + list(aliases))
            text = "" if settings["vllm_omni_audio_output"] else " text-only (vllm_omni_audio_output: false)"
            problems.add(ALL_HOSTS, f"{setting_name}.{stage}",
                         f"names no stage of the{text} {layout} layout", f"use one of: {valid}")
            continue
        if not isinstance(values, dict):
            problems.add(ALL_HOSTS, f"{setting_name}.{stage}", f"must be a mapping, got {show(values)}",
                         f"write e.g. {setting_name}: {{{stage}: {{...}}}}")
            continue
        yield stage, aliases.get(stage, (stage,)), values


def _override_value(label: str, key: Any, value: Any, allowed: dict, owned: dict, problems: Problems) -> Any:
    """The checked value of one override key, or ``_REFUSED`` after adding the problem."""
    if key in owned:
        problems.add(ALL_HOSTS, label, "is computed by the collection and cannot be overridden",
                     f"set it through {owned[key]}")
        return _REFUSED
    if key not in allowed:
        guess = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
        fix = f"did you mean {guess[0]}?" if guess else f"overridable: {', '.join(sorted(allowed))}"
        problems.add(ALL_HOSTS, label, "is not an overridable setting", fix)
        return _REFUSED
    try:
        return allowed[key](value, label)
    except SettingError as error:
        problems.setting(ALL_HOSTS, label, error)
        return _REFUSED


def _refuse_tp_requests(settings: dict, layout: str, tp_requests: dict[str, Any], problems: Problems) -> None:
    """tensor_parallel_size in a stage override: the planner derives it, and PD needs prefill and decode equal."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    tp = settings["vllm_omni_tensor_parallel_size"]
    sizes = {role: tp_requests.get(role, tp) for role in ("prefill", "decode") if role in roles}
    if layout == "pd" and len(set(map(show, sizes.values()))) > 1:
        problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                     f"sets tensor_parallel_size per stage (prefill {show(sizes['prefill'])}, decode "
                     f"{show(sizes['decode'])}); MooncakeConnector needs prefill and decode equal, and the engine "
                     "refuses the pair otherwise",
                     "remove tensor_parallel_size from the stage overrides and set vllm_omni_tensor_parallel_size")
    else:
        problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                     "sets tensor_parallel_size, which the planner derives",
                     "set vllm_omni_tensor_parallel_size instead")


# --- GPU memory ---------------------------------------------------------------------------------


def shared_gpu_split(settings: dict, layout: str, overrides: dict) -> tuple[dict, list[str]]:
    """With vllm_omni_share_gpus, each role's gpu_memory_utilization share unless the user set one.

    Returns the overrides with the split added and the roles the planner chose a share for.
    """
    if not settings["vllm_omni_share_gpus"]:
        return overrides, []
    split = SHARED_GPU_MEMORY[(layout, settings["vllm_omni_audio_output"])]
    chosen = []
    for role, share in split.items():
        engine_args = overrides[role]["engine_args"]
        if "gpu_memory_utilization" not in engine_args:
            engine_args["gpu_memory_utilization"] = share
            chosen.append(role)
    return overrides, chosen


# --- the engine's own rules (data/engine_rules.yml) ------------------------------------------------

_KIND_SETTING = {"engine_args": "vllm_omni_stage_engine_args", "sampling": "vllm_omni_stage_sampling_params"}


def _base_stage(engine: EngineVersion, role: str, stage_id: int) -> tuple[dict, dict]:
    """(engine_args, default_sampling_params) the engine's own definition gives a role's stage."""
    if engine.schema == "stage_args":
        for stage in engine.data["legacy_stages"]:
            if stage["engine_args"]["model_stage"] == MODEL_STAGE[role]:
                return dict(stage["engine_args"]), dict(stage.get("default_sampling_params") or {})
    for stage in engine.data["bundled_deploy"]["stages"]:
        if stage["stage_id"] == stage_id:
            args = {k: v for k, v in stage.items() if k not in ("default_sampling_params", "stage_id")}
            return args, dict(stage.get("default_sampling_params") or {})
    return {}, {}


def _outside(bound: dict, value: Any) -> bool:
    if "allowed" in bound:
        return value not in bound["allowed"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    low, high = bound.get("min"), bound.get("max")
    if low is not None and (value <= low if bound.get("min_open") else value < low):
        # top_k: 0 and -1 both disable it; only values below -1 are refused.
        return True
    return high is not None and (value >= high if bound.get("max_open") else value > high)


def _engine_rule(rule: dict, **values: Any) -> str:
    text = " ".join(str(rule["rule"]).split())
    for name, value in values.items():
        text = text.replace("{" + name + "}", show(value))
    return f'"{text}" ({rule["checked_by"]})'


def _user_stage_key(settings: dict, setting_name: str, layout: str, role: str, key: str) -> str:
    """Where the user set ``key`` for ``role``: the role's own entry, or the alias that covers it (thinker)."""
    entries = settings[setting_name]
    if isinstance(entries.get(role), dict) and key in entries[role]:
        return f"{setting_name}.{role}.{key}"
    for alias, targets in ROLE_ALIASES.get(layout, {}).items():
        if role in targets and isinstance(entries.get(alias), dict) and key in entries[alias]:
            return f"{setting_name}.{alias}.{key}"
    return f"{setting_name}.{role}.{key}"


def check_engine_rules(context: Deployment, problems: Problems) -> None:
    """Every override against the rules the engine of this version checks itself: one value at a time,
    and between the arguments of one stage (with the engine's own values for what the user left alone).

    A stage default max_tokens above the stage's context is not refused: the engine accepts it and stops the
    answer at the context (data/engine_rules.yml not_refused, checked by tests/conformance/test_engine_rules.py)."""
    engine, settings, layout = context.engine, context.settings, context.layout
    rules = _engine_data.engine_rules(engine.version)
    if not rules:
        return
    reported: set[str] = set()

    def refuse(label: str, problem: str, fix: str) -> None:
        if label not in reported:
            reported.add(label)
            problems.add(ALL_HOSTS, label, problem, fix)

    vllm = f"vLLM {engine.vllm}"
    for stage_id, role in enumerate(layout_roles(layout, settings["vllm_omni_audio_output"])):
        base_args, base_sampling = _base_stage(engine, role, stage_id)
        user = context.overrides.get(role, {"engine_args": {}, "sampling": {}})
        planner_set = role in context.planner_shares
        for kind, section in (("engine_args", "engine_args"), ("sampling", "sampling")):
            for key, value in sorted(user[kind].items()):
                bound = rules.get(section, {}).get(key)
                if kind == "engine_args" and key == "gpu_memory_utilization" and planner_set:
                    continue
                if bound and _outside(bound, value):
                    label = _user_stage_key(settings, _KIND_SETTING[kind], layout, role, key)
                    refuse(label, f"is {show(value)}, which {vllm} refuses: {_engine_rule(bound)}",
                           f"set {label} to a value the engine accepts, or remove it (the stage's default is "
                           f"{show((base_args if kind == 'engine_args' else base_sampling).get(key, 'the engine default'))})")
        args = {**base_args, **user["engine_args"]}
        user_args = set(user["engine_args"])
        model_len = args.get("max_model_len") or rules.get("model_max_len", {}).get(settings["vllm_omni_model"])
        cross = rules.get("cross", {})
        batched, seqs = args.get("max_num_batched_tokens"), args.get("max_num_seqs")
        chunked = args.get("enable_chunked_prefill", True)
        touched = user_args & {"max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"}
        if ("batched_tokens_below_model_len" in cross and touched and not chunked and isinstance(batched, int)
                and isinstance(model_len, int) and batched < model_len):
            label = _user_stage_key(settings, "vllm_omni_stage_engine_args", layout, role,
                                    sorted(touched)[-1] if "max_num_batched_tokens" not in touched
                                    else "max_num_batched_tokens")
            refuse(label, f"leaves the {role} stage with max_num_batched_tokens {batched} below max_model_len "
                   f"{model_len} and chunked prefill off, which {vllm} refuses at start-up: "
                   + _engine_rule(cross["batched_tokens_below_model_len"], max_num_batched_tokens=batched,
                                  max_model_len=model_len),
                   f"in vllm_omni_stage_engine_args.{role} raise max_num_batched_tokens to at least {model_len}, "
                   "set max_model_len to at most it, or set enable_chunked_prefill: true")
        if ("batched_tokens_below_num_seqs" in cross and user_args & {"max_num_batched_tokens", "max_num_seqs"}
                and isinstance(batched, int) and isinstance(seqs, int) and batched < seqs):
            key = "max_num_batched_tokens" if "max_num_batched_tokens" in user_args else "max_num_seqs"
            label = _user_stage_key(settings, "vllm_omni_stage_engine_args", layout, role, key)
            refuse(label, f"leaves the {role} stage with max_num_batched_tokens {batched} below max_num_seqs {seqs}, "
                   f"which {vllm} refuses at start-up: "
                   + _engine_rule(cross["batched_tokens_below_num_seqs"], max_num_batched_tokens=batched,
                                  max_num_seqs=seqs),
                   f"in vllm_omni_stage_engine_args.{role} raise max_num_batched_tokens to at least {seqs} "
                   "or lower max_num_seqs")


def _base_memory(engine: EngineVersion, role: str, stage_id: int) -> float:
    """The engine's own gpu_memory_utilization for a role (its bundled stage definitions)."""
    if engine.schema == "stage_args":
        for stage in engine.data["legacy_stages"]:
            if stage["engine_args"]["model_stage"] == MODEL_STAGE[role]:
                return float(stage["engine_args"].get("gpu_memory_utilization", 0.9))
    for stage in engine.data["bundled_deploy"]["stages"]:
        if stage["stage_id"] == stage_id:
            return float(stage.get("gpu_memory_utilization", 0.9))
    return 0.9


def check_gpu_memory(deployment: Deployment, problems: Problems) -> None:
    """Stages placed on one GPU claim their gpu_memory_utilization shares of it at start-up: at most the budget."""
    per_device: dict[str, list[tuple[str, float]]] = {}
    for stage in stage_layout(deployment, "host", "pipeline"):
        share = deployment.overrides[stage["role"]]["engine_args"].get(
            "gpu_memory_utilization", _base_memory(deployment.engine, stage["role"], stage["id"]))
        for device in stage["devices"].split(","):
            per_device.setdefault(device, []).append((stage["role"], share))
    for device, claims in sorted(per_device.items()):
        total = round(sum(share for _unused, share in claims), 4)
        if len(claims) > 1 and total > GPU_MEMORY_BUDGET:
            listed = " + ".join(f"{role} {share:g}" for role, share in claims)
            problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                         f"puts stages on one GPU (pipeline GPU {device}) whose gpu_memory_utilization adds up to "
                         f"{total:g} ({listed}); each stage's engine claims its share of the whole GPU at start-up, so "
                         "the last one to start would find too little free memory",
                         f"lower those stages' gpu_memory_utilization so they add up to at most {GPU_MEMORY_BUDGET:g}")
