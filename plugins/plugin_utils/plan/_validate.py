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
from typing import Any

from ..host import _engine_data, _names
from ..host._engine_data import EngineVersion
from . import _artifacts
from ._checkers import SettingError, show
from ._deployment import Deployment
from ._extra_env import check_extra_env
from ._hosts import ENGINE_GROUP
from ._path_checks import inside
from ._problems import ALL_HOSTS, Problems, host_where
from ._settings import BY_NAME, COMPUTED_FACTS, DEPLOYMENT, REMOVED_SETTINGS, SETTINGS, role_variables
from ._stage_checks import check_engine_rules, check_gpu_memory, shared_gpu_split, stage_overrides


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
            became, fix = REMOVED_SETTINGS[name]
            problems.add(host_where(host), name, f"was removed: {became}", fix)
            continue
        if name.startswith("vllm_omni_"):
            bare, guess = name.removeprefix("vllm_omni_"), _close_match(name, 0.6)
            playbook = role_variables().get(bare)
            fix = (f"{bare} is a variable of playbooks/{playbook}, without the prefix: -e {bare}=..." if playbook else
                   f"did you mean {guess}?" if guess else "see docs/variables.md for the settings")
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
        # Keyed by the whole value (repr keeps 1 and "1" apart): show() shortens long ones, and two values that
        # differ only past its cut must still be refused, never one of them silently taken.
        distinct = {} if same else {repr(v): (h, v) for h, v in seen.items()}
        if len(distinct) > 1:
            examples = ", ".join(f"{h}: {show(v)}" for h, v in list(distinct.values())[:3])
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
    if cert is None and key is None and settings["vllm_omni_frontdoor_enabled"]:
        check_renewal_window(settings, problems)


def check_renewal_window(settings: dict, problems: Problems) -> None:
    """The certificates the collection makes: renewed before they expire, not at every deploy, and the expiry alert
    no earlier than the renewal (else it fires for weeks and no deploy clears it)."""
    days, renew = settings["vllm_omni_tls_certificate_days"], settings["vllm_omni_tls_certificate_renew_days"]
    alert = settings["vllm_omni_alert_certificate_days"]
    if renew >= days:
        problems.add(ALL_HOSTS, "vllm_omni_tls_certificate_renew_days",
                     f"is {renew}, not below vllm_omni_tls_certificate_days ({days}): every certificate the "
                     "collection makes would be due for renewal as soon as it is made, and every deploy would make it "
                     "again and reload nginx", f"choose a window below {days} days (default 30), or raise "
                     "vllm_omni_tls_certificate_days")
    elif settings["vllm_omni_monitoring_enabled"] and alert > renew:
        problems.add(ALL_HOSTS, "vllm_omni_alert_certificate_days",
                     f"is {alert}, longer than the renewal window vllm_omni_tls_certificate_renew_days ({renew}): "
                     f"VllmOmniCertificateExpiresSoon would fire for {alert - renew} days before any deploy renews "
                     "the certificate, and no deploy clears it",
                     f"choose at most {renew} (default 14), or set vllm_omni_tls_certificate_renew_days: {alert}")


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
    if not settings["vllm_omni_audio_output"] and engine.schema != "stage_args" and not engine.pd_pipeline(False):
        text_out = [v for v in _engine_data.supported_versions() if _engine_data.support_table()[v].schema == "stage_args"
                    or _engine_data.support_table()[v].pd_pipeline(False)]
        problems.add(ALL_HOSTS, "vllm_omni_audio_output",
                     f"is false, but vLLM-Omni {version}'s stages: schema cannot drop the talker and code2wav stages "
                     "(its Qwen3-Omni pipeline is fixed in Python)",
                     f"set vllm_omni_version to {' or '.join(text_out)} for text-only pipelines, "
                     "or vllm_omni_audio_output: true")
        return None
    if not settings["vllm_omni_audio_output"] and engine.schema != "stage_args" and layout != "pd":
        problems.add(ALL_HOSTS, "vllm_omni_audio_output",
                     f"is false with vllm_omni_layout: {layout}, but vLLM-Omni {version}'s stages: schema has a "
                     "text-only Qwen3-Omni pipeline for prefill/decode only (the collection's engine plugin registers "
                     f"{engine.pd_pipeline(False)}); its aggregated pipeline always has the talker and code2wav",
                     f"set vllm_omni_layout: pd for a text-only pipeline on {version}, "
                     f"set vllm_omni_version to {' or '.join(_engine_data.versions_with_schema('stage_args'))}, "
                     "or vllm_omni_audio_output: true")
        return None
    return engine


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


def check_key_rotation(settings: dict, hosts: list[str], hostvars: dict, problems: Problems) -> None:
    """vllm_omni_api_keys (seen by name only: a secret is never read to plan) needs a required key and the front
    door. Deploy's secrets check refuses the same with the vault open; render refuses it here, without the vault."""
    if settings["vllm_omni_api_key_required"] and settings["vllm_omni_frontdoor_enabled"]:
        return
    off = "vllm_omni_api_key_required" if not settings["vllm_omni_api_key_required"] else "vllm_omni_frontdoor_enabled"
    why = ("nothing checks a key" if off == "vllm_omni_api_key_required" else "without the front door clients reach "
           "vllm-router, which hands their key to the engines, and an engine checks one key (vllm_omni_api_key) only")
    for host in hosts:
        if "vllm_omni_api_keys" in hostvars.get(host, {}):
            problems.add(host_where(host), "vllm_omni_api_keys", f"is set, but {off} is false: {why}",
                         f"remove vllm_omni_api_keys (a rotation needs it only while clients move to the new key), "
                         f"or set {off}: true")


def check_rdma_devices(settings: dict, problems: Problems) -> None:
    if settings["vllm_omni_mooncake_rdma_devices"] and settings["vllm_omni_mooncake_protocol"] != "rdma":
        problems.add(ALL_HOSTS, "vllm_omni_mooncake_rdma_devices",
                     "is set but vllm_omni_mooncake_protocol is tcp, so the devices would be ignored",
                     "set vllm_omni_mooncake_protocol: rdma, or remove the device list")
