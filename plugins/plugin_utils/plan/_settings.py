# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Every inventory setting the collection reads: name, scope, type, default, meaning.

This table is the single source for the settings: the planner validates and defaults from it,
``docs/variables.md`` is generated from it (``make docs``; a unit test fails when they drift),
and unknown or misspelled ``vllm_omni_*`` names are found by comparing against it.

Scopes:
* ``host``: may differ per host (host_vars, or per-host lines in the inventory).
* ``deployment``: one value for the whole deployment (group_vars). Different values on
  different hosts are refused, because one deployment runs one engine version, model, layout.
* ``playbook``: read by one playbook (usually passed with ``-e``); not part of the plan.
* ``secret``: read by a role while writing a host's secret files; never part of the plan.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..host import _platforms

HOST = "host"
DEPLOYMENT = "deployment"
PLAYBOOK = "playbook"  # read by a playbook (usually from -e), not part of the plan
SECRET = "secret"  # noqa: S105 - a scope name: read by the roles on the hosts only; never in the plan

# Names the collection itself sets as facts during a run; they appear in hostvars on a second
# pass and are not user settings.
COMPUTED_FACTS = frozenset({"vllm_omni_plan", "vllm_omni_gpu_facts", "vllm_omni_os_facts"})

# Removed or renamed settings: name -> message. Empty until a release renames something;
# the check runs regardless so a rename never silently drops a user's value.
REMOVED_SETTINGS: dict[str, str] = {}


class SettingError(ValueError):
    """A value is wrong. ``problem`` says what is wrong, ``fix`` what to write instead."""

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def show(value: Any) -> str:
    """A value as the user would write it (JSON-ish), short."""
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if value is None:
        return "null"
    return type(value).__name__


def _cli_hint(name: str, example: Any) -> str:
    return (
        f"write it without quotes in YAML; on the command line pass JSON: "
        f"-e '{json.dumps({name: example})}'"
    )


# --- value checkers: each returns the normalized value or raises SettingError ---------------


def check_int(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    example = low if low is not None else 1
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            raise SettingError(f"is a string ({show(value)}), not a number", _cli_hint(name, int(value)))
        raise SettingError(f"must be an integer, got {type_name(value)} {show(value)}",
                           f"write a whole number, e.g. {name}: {example}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise SettingError(f"is {value}, must be {bounds}", f"choose a value {bounds}")
    return value


def check_float(value: Any, name: str, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                pass
            else:
                raise SettingError(f"is a string ({show(value)}), not a number", _cli_hint(name, float(value)))
        raise SettingError(f"must be a number, got {type_name(value)} {show(value)}",
                           f"write a number between {low} and {high}")
    try:
        value = float(value)
    except OverflowError:
        raise SettingError(f"is {show(value)}, far outside [{low}, {high}]", f"choose a number in [{low}, {high}]") from None
    if math.isnan(value) or (value <= low if low_open else value < low) or value > high:
        bracket = "(" if low_open else "["
        raise SettingError(f"is {value}, must be in {bracket}{low}, {high}]", f"choose a number in {bracket}{low}, {high}]")
    return value


def check_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false", "on", "off", "1", "0"):
        raise SettingError(f"is the string {show(value)}, not a boolean",
                           f"write true or false without quotes; on the command line: "
                           f"-e '{json.dumps({name: True})}'")
    raise SettingError(f"must be true or false, got {type_name(value)} {show(value)}", "write true or false")


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise SettingError(f"is {show(value)}, must be one of {', '.join(choices)}",
                           f"set {name} to one of: {', '.join(choices)}")
    return value


def check_str(value: Any, name: str, pattern: str, what: str, example: str) -> str:
    if not isinstance(value, str):
        raise SettingError(f"must be a string ({what}), got {type_name(value)} {show(value)}",
                           f'write it as a quoted string, e.g. {name}: "{example}"')
    if not re.fullmatch(pattern, value):
        raise SettingError(f"{show(value)} is not {what}",
                           f'use only the characters allowed for {what}, e.g. "{example}"')
    return value


def check_ipv4(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise SettingError(f"must be an IPv4 address string, got {type_name(value)} {show(value)}",
                           f'write it as a quoted address, e.g. {name}: "10.0.0.11"')
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        raise SettingError(f"{show(value)} is not an IP address",
                           f"set {name} to the IPv4 address the other hosts reach this host on") from None
    if address.version == 6:
        raise SettingError(f"{show(value)} is an IPv6 address; the engine's KV transfer (Mooncake) "
                           "and bootstrap URLs are built for IPv4 here",
                           f"set {name} to this host's IPv4 address")
    if address.is_unspecified or address.is_multicast or str(address) == "255.255.255.255":
        raise SettingError(f"{show(value)} cannot be a peer address (unspecified, multicast or broadcast)",
                           f"set {name} to the IPv4 address the other hosts reach this host on")
    return str(address)


def check_gpu_list(value: Any, name: str) -> list[int]:
    if isinstance(value, str):
        raise SettingError(f"is a string ({show(value)}), not a list of GPU indices",
                           f"write a YAML list of numbers, e.g. {name}: [0, 1, 2, 3]")
    if not isinstance(value, (list, tuple)):
        raise SettingError(f"must be a list of GPU indices, got {type_name(value)} {show(value)}",
                           f"write a YAML list of numbers, e.g. {name}: [0, 1, 2, 3]")
    if not value:
        raise SettingError("is an empty list", "list the physical GPU indices (nvidia-smi order) to use")
    seen: set[int] = set()
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise SettingError(f"holds {show(item)} ({type_name(item)}); GPU indices are whole numbers",
                               f"write a YAML list of numbers, e.g. {name}: [0, 1, 2, 3]")
        if item < 0 or item > 1023:
            raise SettingError(f"holds {item}; GPU indices run from 0 (as nvidia-smi numbers them)",
                               "list the indices nvidia-smi shows on this host")
        if item in seen:
            raise SettingError(f"lists GPU {item} twice", "list every GPU once")
        seen.add(item)
    return sorted(seen)


def check_port_range(value: Any, name: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SettingError(f"must be a list of two ports [first, last], got {show(value)}",
                           f"write e.g. {name}: [16000, 16999]")
    low = check_int(value[0], name, 1024, 65535)
    high = check_int(value[1], name, 1024, 65535)
    if low >= high:
        raise SettingError(f"first port {low} is not below last port {high}", f"write e.g. {name}: [16000, 16999]")
    return [low, high]


def check_pipelines_per_host(value: Any, name: str) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, str) and not value.strip().isdigit():
        raise SettingError(f"is {show(value)}, must be auto or a whole number", f"write {name}: auto, or e.g. {name}: 2")
    return check_int(value, name, 1, 64)


# Directories the system owns: a root may sit one level under those that hold add-on software
# (/opt/vllm-omni, /etc/vllm-omni, /srv/models) but never be one of them.
_TMP, _VAR_TMP = "/" + "tmp", "/var/" + "tmp"  # names compared with, never written to
SYSTEM_DIRECTORIES = frozenset((
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", _TMP, "/usr", "/usr/local", "/var", "/var/cache", "/var/lib",
    "/var/log", "/var/opt", "/var/spool", _VAR_TMP,
))
# Trees nothing of ours may live in: the OS's programs and libraries (root would run what the engine
# user could replace), world-writable places (anyone could plant a directory first), the package
# manager's and systemd's own state, other users' homes.
PROTECTED_TREES = ("/bin", "/boot", "/dev", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", _TMP,
                   "/usr", _VAR_TMP, "/home", "/root", "/etc/systemd", "/etc/ssh", "/etc/sudoers.d", "/etc/pam.d",
                   "/etc/cron.d", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/log", "/var/spool")
ALLOWED_UNDER_PROTECTED = ("/usr/local/",)
PATH_MAX = 255


def inside(path: str, tree: str) -> bool:
    """``path`` is ``tree`` or below it (whole components only: /opt/vllm is not inside /opt/vl)."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def check_max_unavailable(value: Any, name: str) -> int | str:
    """A count of pipelines (at least 1) or a share of the serving ones, ``"25%"`` (1-100)."""
    if isinstance(value, str):
        if re.fullmatch(r"([1-9][0-9]?|100)%", value.strip()):
            return value.strip()
        raise SettingError(f"is {show(value)}, neither a count nor a percentage",
                           f'write a whole number of pipelines ({name}: 1) or a share of them ({name}: "25%")')
    return check_int(value, name, 1, 100000)


def check_abs_path(value: Any, name: str) -> str:
    path = check_str(value, name, r"/[A-Za-z0-9._/-]{1,254}", "an absolute path of letters, digits, . _ - / "
                     f"(at most {PATH_MAX} characters)", "/opt/vllm-omni")
    if "/../" in path + "/" or "/./" in path + "/" or "//" in path:
        raise SettingError(f"{show(value)} contains '..', '.' or '//' parts", "write a plain absolute path")
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    if path in SYSTEM_DIRECTORIES:
        raise SettingError(f"{show(value)} is a system directory; uninstall would remove it",
                           "use a directory of its own, e.g. /opt/vllm-omni")
    if any(inside(path, tree) for tree in PROTECTED_TREES) and not path.startswith(ALLOWED_UNDER_PROTECTED):
        tree = next(tree for tree in PROTECTED_TREES if inside(path, tree))
        raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system (or is writable by anyone)",
                           "use a directory of its own under /opt, /srv, /var/lib or /etc, e.g. /opt/vllm-omni")
    return path


def check_model(value: Any, name: str) -> str:
    model = check_str(value, name, MODEL_PATTERN, "a Hugging Face id org/name or an absolute path",
                      "Qwen/Qwen3-Omni-30B-A3B-Instruct")
    # A path names exactly the directory the engine reads: no '..' or '.' parts. (An id's parts start
    # with a letter or digit, so only paths can have them.)
    if model.startswith("/") and ("/../" in model + "/" or "/./" in model + "/"):
        raise SettingError(f"{show(value)} contains '..' or '.' parts", "write the model directory's plain absolute path")
    hidden = next((why for root, why in SANDBOX_HIDDEN.items() if model == root or model.startswith(root + "/")), None)
    if model.startswith("/") and hidden:
        raise SettingError(f"{show(value)} is under {hidden}, so the engine would find it empty or missing",
                           "put the model directory elsewhere (e.g. /srv/models/<name> or under vllm_omni_hf_home), "
                           "or stage it with vllm_omni_model_source")
    if model.startswith("/"):
        path = model.rstrip("/") or "/"
        if path in SYSTEM_DIRECTORIES:
            raise SettingError(f"{show(value)} is a system directory, not a model directory (the engine loads it "
                               "with trust_remote_code: any Python file there runs as the engine)",
                               "point vllm_omni_model at the model's own directory, e.g. /srv/models/<name>")
        tree = next((t for t in MODEL_PROTECTED_TREES if inside(path, t)), None)
        if tree and not path.startswith(ALLOWED_UNDER_PROTECTED):
            raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system: the engine loads a model "
                               "directory with trust_remote_code, so whatever Python file lies there runs as the engine",
                               "put the model in a directory of its own, e.g. /srv/models/<name>, /opt/models/<name> "
                               "or under vllm_omni_hf_home, or stage it with vllm_omni_model_source")
    return model


# Where a model directory may not lie, on the hosts: the roots' protected trees and the system's configuration.
MODEL_PROTECTED_TREES = (*PROTECTED_TREES, "/etc", "/var/lib/dpkg", "/var/mail", "/var/lib/systemd",
                         "/var/lib/vllm-omni-serve")
# On the controller, a model directory (vllm_omni_model_directory) is walked, hashed and sent to every host:
# never the system's trees, a home directory as a whole, or a world-writable place.
CONTROLLER_PROTECTED_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin",
                              "/sys", "/usr", "/var/log", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/spool",
                              "/var/cache", "/var/mail")


def check_controller_dir(value: Any, name: str) -> str:
    """A directory on the controller whose every file is sent to the hosts: a plain absolute path of its own."""
    path = check_controller_file(value, name)
    if path in SYSTEM_DIRECTORIES or path in ("/", "/root") or re.fullmatch(r"/home/[^/]+", path):
        raise SettingError(f"{show(value)} is a system or home directory as a whole: every file in it would be hashed "
                           "and sent to every engine host", "point it at the model's own directory, e.g. "
                           "/srv/models/<name> (a `hf download --local-dir` result)")
    tree = next((t for t in CONTROLLER_PROTECTED_TREES if inside(path, t)), None)
    if tree and not path.startswith(ALLOWED_UNDER_PROTECTED):
        raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system (or anyone may write there): "
                           "its files would be sent to every engine host and loaded with trust_remote_code",
                           "copy the model into a directory of its own, e.g. /srv/models/<name>, and point "
                           f"{name} there")
    return path


# Paths the engine unit's sandbox (plan["hardening"]) hides from the engine, and by what.
SANDBOX_HIDDEN = {
    "/home": "/home, which the engine unit hides (ProtectHome=yes)",
    "/root": "/root, which the engine unit hides (ProtectHome=yes)",
    "/run/user": "/run/user, which the engine unit hides (ProtectHome=yes)",
    "/tmp": "/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)",  # noqa: S108 - refused
    "/var/tmp": "/var/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)",  # noqa: S108
    "/proc": "/proc, the kernel's process view (ProtectProc=invisible), not a model directory",
    "/sys": "/sys, the kernel's device view, not a model directory",
    "/dev": "/dev, the device nodes, not a model directory",
}


def check_controller_file(value: Any, name: str) -> str:
    """A file on the controller (TLS material): an absolute plain path; the host-root rules do not apply."""
    path = check_str(value, name, r"/[A-Za-z0-9._/@+-]{1,4095}", "an absolute path on the controller of letters, "
                     "digits, . _ - + @ /", "/etc/ssl/vllm-omni/router.pem")
    if "/../" in path + "/" or "/./" in path + "/" or "//" in path or path.endswith("/"):
        raise SettingError(f"{show(value)} contains '..', '.' or '//' parts or ends with '/'",
                           "write the plain absolute path of the file")
    return path


def check_string_list(value: Any, name: str, pattern: str, what: str) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise SettingError(f"must be a list of {what}, got {type_name(value)} {show(value)}",
                           f"write a YAML list, e.g. {name}: [mlx5_0, mlx5_1]")
    items = [check_str(item, name, pattern, what, "mlx5_0") for item in value]
    if len(set(items)) != len(items):
        raise SettingError("lists a name twice", "list every name once")
    return items


def check_cidr_list(value: Any, name: str) -> list[str]:
    """Client networks (IPv4 or IPv6), written as networks: host bits set are a typo, not a network."""
    example = f'{name}: ["10.0.0.0/16", "192.168.1.20/32"]'
    if not isinstance(value, (list, tuple)):
        raise SettingError(f"must be a list of networks, got {type_name(value)} {show(value)}",
                           f"write a YAML list, e.g. {example}")
    networks = []
    for item in value:
        if not isinstance(item, str):
            raise SettingError(f"holds {show(item)} ({type_name(item)}), not a network string",
                               f"write each network quoted, e.g. {example}")
        try:
            network = ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise SettingError(f"holds {show(item)}, which is not a network like 10.0.0.0/16",
                               f"write networks as address/prefix, e.g. {example}") from None
        if str(network) != item.strip() and str(network.network_address) != item.strip():
            raise SettingError(f"holds {show(item)}, which has host bits set (the network is {network})",
                               f'write "{network}", or "{item.split("/")[0]}/{network.max_prefixlen}" for one host')
        networks.append(str(network))
    if len(set(networks)) != len(networks):
        raise SettingError("lists a network twice", "list every network once")
    parsed = [ipaddress.ip_network(n) for n in networks]
    for a in parsed:
        for b in parsed:
            if a != b and a.version == b.version and a.subnet_of(b):
                # nftables refuses overlapping elements in an interval set: it would fail on the host.
                raise SettingError(f"lists {a}, which lies inside {b}", f"keep only {b} (or only {a})")
    return networks


ENV_NAME = r"[A-Z_][A-Z0-9_]{0,127}"
ENV_VALUE = r"[A-Za-z0-9_.,:/=@+% -]{0,1024}"


def check_env(value: Any, name: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SettingError(f"must be a mapping of NAME: value, got {type_name(value)} {show(value)}",
                           f'write e.g. {name}: {{NCCL_DEBUG: "WARN"}}')
    result = {}
    for key, item in value.items():
        if not isinstance(key, str) or not re.fullmatch(ENV_NAME, key):
            raise SettingError(f"has the variable name {show(key)}; names are upper-case letters, digits and _",
                               "rename it, e.g. NCCL_DEBUG")
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SettingError(f"{key} must be a string, got {type_name(item)} {show(item)}",
                               f'quote the value, e.g. {key}: "1"')
        text = str(item)
        if not re.fullmatch(ENV_VALUE, text):
            raise SettingError(f"{key} = {show(text)} holds characters an environment file or unit would "
                               "interpret (quotes, $, `, \\, newlines)",
                               "use letters, digits, spaces and . , : / = @ + % - _ only")
        result[key] = text
    return result


def check_mapping(value: Any, name: str) -> dict:
    if not isinstance(value, dict):
        raise SettingError(f"must be a mapping of stage name to settings, got {type_name(value)} {show(value)}",
                           f"write e.g. {name}: {{decode: {{max_num_seqs: 32}}}}")
    return dict(value)


# --- the table --------------------------------------------------------------------------------

MODEL_PATTERN = r"(/[A-Za-z0-9._-]+)+|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
NAME_PATTERN = r"[a-z][a-z0-9-]{0,23}"


@dataclass(frozen=True)
class Setting:
    name: str
    scope: str
    default: Any
    kind: str  # shown in the docs table
    doc: str
    check: Callable[[Any, str], Any] = field(repr=False, compare=False, default=lambda v, n: v)
    default_doc: str | None = None  # for computed defaults

    def validate(self, value: Any) -> Any:
        return self.check(value, self.name)


SETTINGS: tuple[Setting, ...] = (
    # Per host.
    Setting("vllm_omni_gpus", HOST, None, "list of int",
            "Physical GPU indices (nvidia-smi numbering) this deployment may use on the host. Optional once GPU "
            "discovery ran (deploy.yml): then every free discovered GPU. Pipelines are placed topology-aware when "
            "discovery read `nvidia-smi topo -m`, in ascending order otherwise; left-over GPUs are reported.",
            check_gpu_list, default_doc="discovered GPUs"),
    Setting("vllm_omni_ip", HOST, None, "IPv4 address",
            "Address the other hosts and the router reach this host on. Engines bind to it and it "
            "becomes kv_ip / VLLM_HOST_IP. Must not be loopback unless engines and router share one host.",
            check_ipv4, default_doc="`ansible_host`"),
    Setting("vllm_omni_pipelines_per_host", HOST, "auto", "`auto` or int",
            "How many whole pipelines to run on the host; `auto` = as many as its GPUs fit, and GPUs left over "
            "may serve pipelines that span hosts (vllm_omni_span_hosts). A number: exactly that many whole "
            "pipelines, and no GPU of the host for spanning pipelines.",
            check_pipelines_per_host),
    Setting("vllm_omni_span_group", HOST, "all", "string",
            "Hosts pool their spare GPUs into spanning pipelines only with hosts of the same group (a rack, one "
            "RDMA or NVLink domain). Every host is in group `all` unless set.",
            lambda v, n: check_str(v, n, NAME_PATTERN, "a lower-case name (a-z, 0-9, -; up to 24 characters)",
                                   "rack-a")),
    Setting("vllm_omni_host_platform", HOST, "auto", "`auto` or a platform",
            "The host platform (data/platforms.yml, docs/platforms.md) whose locks the host's venvs install from and "
            "whose Python builds them: `auto` = the one matching the OS discovery reads (render assumes debian12 "
            "until then). Set it for a close derivative of a supported OS with the same Python and glibc; preflight "
            "checks the host has them.",
            lambda v, n: check_choice(v, n, ("auto", *_platforms.platform_ids()))),
    # One value for the deployment.
    Setting("vllm_omni_version", DEPLOYMENT, "0.26.0", "string",
            "vLLM-Omni version (vLLM is pinned to the same version). One of the support table's "
            "versions (README, Support matrix).",
            lambda v, n: check_str(v, n, r"\d+\.\d+\.\d+", "a version like 0.26.0", "0.26.0")),
    Setting("vllm_omni_model", DEPLOYMENT, "Qwen/Qwen3-Omni-30B-A3B-Instruct", "string",
            "Hugging Face repository id (`org/name`) or absolute path of the model on the hosts.",
            check_model),
    Setting("vllm_omni_served_model_name", DEPLOYMENT, None, "string",
            "Model name clients send in requests (`--served-model-name`).",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}", "a model name", "qwen3-omni"),
            default_doc="`vllm_omni_model`"),
    Setting("vllm_omni_layout", DEPLOYMENT, "pd", "`pd` or `aggregated`",
            "`pd`: prefill and decode thinker stages on separate GPUs with Mooncake KV transfer "
            "(4 stages). `aggregated`: the engine's own 3-stage layout.",
            lambda v, n: check_choice(v, n, ("pd", "aggregated"))),
    Setting("vllm_omni_audio_output", DEPLOYMENT, True, "bool",
            "`true`: the full Qwen3-Omni pipeline, text and speech out (talker + code2wav stages on one further GPU). "
            "`false`: text out only, thinker stages alone (pd: prefill + decode; aggregated: one thinker), one GPU "
            "less per pipeline. Needs a stage_args version (the stages: schema fixes the pipeline in Python).",
            check_bool),
    Setting("vllm_omni_share_gpus", DEPLOYMENT, False, "bool",
            "`true`: every stage of a pipeline runs on the pipeline's one tensor-parallel GPU group (a single-GPU "
            "host, a development box, a small model). The planner splits gpu_memory_utilization between the "
            "stages (docs/variables.md#shared-gpus) unless vllm_omni_stage_engine_args sets it; the shares of the "
            "stages on one GPU must add up to at most 0.95, and each share must hold that stage's weights.",
            check_bool),
    Setting("vllm_omni_tensor_parallel_size", DEPLOYMENT, 1, "int (1, 2, 4, 8)",
            "Tensor-parallel size of the thinker stages (prefill and decode alike: the engine refuses "
            "unequal sizes). Talker and code2wav share one further GPU.",
            # _check_tp is defined below this table: the lambda looks it up when a value is checked.
            lambda v, n: _check_tp(v, n)),  # pylint: disable=unnecessary-lambda
    Setting("vllm_omni_prefill_replicas", DEPLOYMENT, 1, "int",
            "Prefill engines per pd pipeline (xPyD: with vllm_omni_decode_replicas the prefill:decode ratio). Above "
            "1, the pipeline's stages run as processes of their own (a head and headless stages; "
            "docs/multi-host-pd.md), on one host when they fit, across hosts otherwise. Text-out pipelines only "
            "(vllm_omni_audio_output: false).",
            lambda v, n: check_int(v, n, 1, 64)),
    Setting("vllm_omni_decode_replicas", DEPLOYMENT, 1, "int",
            "Decode engines per pd pipeline; see vllm_omni_prefill_replicas.",
            lambda v, n: check_int(v, n, 1, 64)),
    Setting("vllm_omni_span_hosts", DEPLOYMENT, True, "bool",
            "Let a text-out pd pipeline span hosts: spare GPUs of hosts in one vllm_omni_span_group (a host too small "
            "for a whole pipeline, GPUs left over after whole pipelines) make pipelines of their own. A whole "
            "pipeline on one host is always preferred. false: every pipeline on one host.",
            check_bool),
    Setting("vllm_omni_stage_master_port_base", DEPLOYMENT, 8400, "port",
            "Port of the OmniMasterServer where a distributed pipeline's headless stages register "
            "(`--omni-master-port`), on its head host: base + the head's process index on that host.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_stage_zmq_port_range", DEPLOYMENT, [20000, 23999], "[first, last]",
            "Ports a distributed pipeline's processes open for each other (the master's handshake and data "
            "sockets, the coordinator): each process gets its own slice (VLLM_PORT = its first port). Keep it "
            "below the kernel's ephemeral range.",
            check_port_range),
    Setting("vllm_omni_stage_zmq_ports_per_process", DEPLOYMENT, 64, "int",
            "Size of each distributed process's slice of vllm_omni_stage_zmq_port_range.",
            lambda v, n: check_int(v, n, 16, 4096)),
    Setting("vllm_omni_replica_lb_policy", DEPLOYMENT, "least-queue-length", "string",
            "How a distributed pipeline's head spreads requests over a stage's replicas (`--omni-lb-policy`): "
            "random, round-robin or least-queue-length.",
            lambda v, n: check_choice(v, n, ("random", "round-robin", "least-queue-length"))),
    Setting("vllm_omni_api_port_base", DEPLOYMENT, 8091, "port",
            "API port of a host's first pipeline; pipeline i listens on base + i.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_kv_connector", DEPLOYMENT, "mooncake", "`mooncake` or `nixl`",
            "PD: how prefill's KV reaches decode. `mooncake`: Mooncake's transfer engine (TCP or RDMA, "
            "vllm_omni_mooncake_*). `nixl`: NVIDIA's NIXL over UCX, which picks RDMA where the host has "
            "verbs devices and TCP otherwise (vllm_omni_nixl_*). Both through the collection's subclass of "
            "vLLM's connector; which versions run which: the README's support matrix.",
            lambda v, n: check_choice(v, n, ("mooncake", "nixl"))),
    Setting("vllm_omni_bootstrap_port_base", DEPLOYMENT, 8998, "port",
            "Mooncake bootstrap port (VLLM_MOONCAKE_BOOTSTRAP_PORT) of a host's first pipeline; "
            "pipeline i uses base + i.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_mooncake_rpc_port_range", DEPLOYMENT, [16000, 16999], "[first, last]",
            "Ports Mooncake's transfer engine may listen on; pipeline i of a host gets the i-th slice "
            "(MC_MIN_RPC_PORT..MC_MAX_RPC_PORT). Open it between hosts.",
            check_port_range),
    Setting("vllm_omni_mooncake_rpc_ports_per_pipeline", DEPLOYMENT, 64, "int",
            "Size of each pipeline's slice of the Mooncake range. Fixed, so adding or removing a pipeline never "
            "moves (and restarts) the others; needs at least 8 per thinker GPU (2 listeners per prefill/decode "
            "worker, doubled).",
            lambda v, n: check_int(v, n, 8, 8192)),
    Setting("vllm_omni_mooncake_protocol", DEPLOYMENT, "tcp", "`tcp` or `rdma`",
            "Mooncake transport for the prefill-to-decode KV transfer.",
            lambda v, n: check_choice(v, n, ("tcp", "rdma"))),
    Setting("vllm_omni_mooncake_rdma_devices", DEPLOYMENT, [], "list of string",
            "RDMA devices Mooncake may use (e.g. `mlx5_0`); empty = auto-discover. Only with protocol rdma.",
            lambda v, n: check_string_list(v, n, r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", "RDMA device names")),
    Setting("vllm_omni_kv_load_failure_policy", DEPLOYMENT, "fail", "`fail` or `recompute`",
            "PD: what a decode engine does when loading a request's KV from prefill fails (kv_transfer_config."
            "kv_load_failure_policy). `fail` ends that request with an error (the client sees it, "
            "VllmOmniPDHandoffFailures counts it); `recompute` prefills it again on decode, silently, at "
            "decode's cost.",
            lambda v, n: check_choice(v, n, ("fail", "recompute"))),
    Setting("vllm_omni_mooncake_abort_timeout", DEPLOYMENT, 120, "seconds",
            "PD: how long a prefill engine keeps a finished request's KV blocks for decode to pull before it "
            "frees them (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT; vLLM's default is 480). Decode gives up on a "
            "transfer 60 s after it. Long enough for a busy decode to schedule the request, short enough "
            "that KV a dead or vanished decode never pulls is back within minutes.",
            lambda v, n: check_int(v, n, 10, 3600)),
    Setting("vllm_omni_nixl_side_channel_port_base", DEPLOYMENT, 5600, "port",
            "NIXL: the handshake port of a host's first KV engine; process i's prefill engine listens on "
            "base + 2i, its decode engine on base + 2i + 1 (each stage's own, in its stage config). Open "
            "between inventory hosts.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_nixl_ucx_port_range", DEPLOYMENT, [17000, 17999], "[first, last]",
            "NIXL: ports UCX's TCP transport may listen on; process i of a host gets the i-th slice "
            "(UCX_TCP_PORT_RANGE). Open between inventory hosts.",
            check_port_range),
    Setting("vllm_omni_nixl_ucx_ports_per_pipeline", DEPLOYMENT, 64, "int",
            "NIXL: size of each process's slice of the UCX range. Fixed, so adding or removing a pipeline "
            "never moves (and restarts) the others; needs at least 8 per thinker GPU (a UCX agent per "
            "prefill/decode worker, listeners per network interface).",
            lambda v, n: check_int(v, n, 8, 8192)),
    Setting("vllm_omni_stage_engine_args", DEPLOYMENT, {}, "mapping",
            "Per-stage engine argument overrides: `{stage: {arg: value}}`. Stages: prefill, decode, "
            "talker, code2wav (pd) or thinker, talker, code2wav (aggregated); `thinker` in pd sets both "
            "thinker stages. Allowed arguments: docs/variables.md#stage-overrides.",
            check_mapping),
    Setting("vllm_omni_stage_sampling_params", DEPLOYMENT, {}, "mapping",
            "Per-stage default sampling parameter overrides, same stage names: `{stage: {param: value}}`.",
            check_mapping),
    Setting("vllm_omni_pipeline_prefix", DEPLOYMENT, "omni", "string",
            "Pipeline names are prefix + index (omni0, omni1, ...); they name units, directories, engine ids.",
            lambda v, n: check_str(v, n, NAME_PATTERN, "a lower-case name (a-z, 0-9, -; up to 24 characters)",
                                   "omni")),
    Setting("vllm_omni_install_root", DEPLOYMENT, "/opt/vllm-omni", "absolute path",
            "Root of the per-version engine venvs (`<root>/venvs/<version>`).", check_abs_path),
    Setting("vllm_omni_config_root", DEPLOYMENT, "/etc/vllm-omni", "absolute path",
            "Per-pipeline config directories (`<root>/<pipeline>/`).", check_abs_path),
    Setting("vllm_omni_hf_home", DEPLOYMENT, "/var/lib/vllm-omni/hf", "absolute path",
            "HF_HOME of the engines: where model weights are cached on the hosts.", check_abs_path),
    Setting("vllm_omni_model_staging", DEPLOYMENT, False, "bool",
            "true: engines run with HF_HUB_OFFLINE=1 and load the weights already in HF_HOME (put there by the "
            "operator). vllm_omni_model_source stages them instead, and implies it.",
            check_bool),
    Setting("vllm_omni_model_source", DEPLOYMENT, "none", "`none`, `hub` or `directory`",
            "Where the weights come from. `none`: each engine host downloads them itself on first start. `hub`: the "
            "controller fetches vllm_omni_model at vllm_omni_model_revision once (huggingface_hub; HF_ENDPOINT and "
            "vllm_omni_hf_token honoured) and verifies every file against the hub's hashes. `directory`: the files "
            "in vllm_omni_model_directory on the controller. Either way every engine host gets a hash-checked copy "
            "in HF_HOME's cache layout (fanned out host to host, docs/model-staging.md) and runs offline.",
            lambda v, n: check_choice(v, n, ("none", "hub", "directory"))),
    Setting("vllm_omni_model_revision", DEPLOYMENT, None, "string",
            "The staged revision: the 40-character commit id (hub), or a name for the directory's copy; it names "
            "the snapshot in HF_HOME, and a new one restarts the engines on it.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", "a commit id or a name of letters, "
                                   "digits, . _ -", "5d4d1c4e1e0b8a7b2d3c6f9e8a7b6c5d4e3f2a1b")),
    Setting("vllm_omni_model_directory", DEPLOYMENT, None, "path (controller)",
            "With vllm_omni_model_source `directory`: the controller directory holding the model's files "
            "(config.json, tokenizer, *.safetensors), e.g. a `hf download --local-dir` result. Not a system or "
            "home directory (as a whole), nor in the system's trees; deploy checks on the controller that it holds "
            "a model (config.json and weights) and no link out of it other than into a Hugging Face cache.",
            check_controller_dir),
    Setting("vllm_omni_artifact_port", DEPLOYMENT, 8873, "port",
            "The rsync daemon's port while a deploy fans wheel sets and weights out host to host (open to "
            "inventory peers only, and only during the distribution); the controller serves its one copy on it too.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_artifact_controller_address", DEPLOYMENT, None, "IPv4 address",
            "The address hosts reach the controller on, to pull the first copy of each artifact. Unset: the address "
            "the first host sees the controller's SSH connection come from.",
            check_ipv4, default_doc="the controller's SSH source address"),
    Setting("vllm_omni_init_timeout", DEPLOYMENT, 1800, "seconds",
            "Engine start-up budget (`--init-timeout`, `--stage-init-timeout`); cold model loads exceed 10 min.",
            lambda v, n: check_int(v, n, 60, 86400)),
    Setting("vllm_omni_engine_backend", DEPLOYMENT, "engine", "`engine` or `simulator`",
            "`simulator` runs the xpyd-sim stand-in instead of the engine on CPU-only hosts (tests, rehearsals).",
            lambda v, n: check_choice(v, n, ("engine", "simulator"))),
    Setting("vllm_omni_allow_busy_gpus", DEPLOYMENT, False, "bool",
            "Use GPUs that discovery reports busy (memory in use or compute processes not of this deployment). "
            "Without it, busy GPUs listed in vllm_omni_gpus are refused and undeclared ones are skipped.",
            check_bool),
    Setting("vllm_omni_rolling_max_unavailable", DEPLOYMENT, 1, "int or `N%`",
            "How many serving pipelines a deploy or upgrade restarts at once (drained from the routers first); "
            "a count or a share of the serving pipelines (`\"25%\"`, rounded down). One always keeps serving. "
            "New pipelines and a first deploy start together.",
            check_max_unavailable),
    Setting("vllm_omni_extra_env", DEPLOYMENT, {}, "mapping",
            "Extra environment for every pipeline (e.g. NCCL_* tuning). Planner-owned names are refused.",
            check_env),
    # Router (vllm-router) in front of every pipeline: hosts of group vllm_omni_router (default: the
    # first engine host).
    Setting("vllm_omni_router_port", DEPLOYMENT, 8000, "port", "Router API port (clients send requests here).",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_router_metrics_port", DEPLOYMENT, 29000, "port", "Router Prometheus metrics port.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_router_policy", DEPLOYMENT, "round_robin", "string",
            "Load-balancing policy over the pipelines: round_robin, random, power_of_two, cache_aware, "
            "consistent_hash.",
            lambda v, n: check_choice(v, n, ("round_robin", "random", "power_of_two", "cache_aware",
                                             "consistent_hash"))),
    Setting("vllm_omni_router_max_retries", DEPLOYMENT, 2, "int",
            "Retries of a failed request on another pipeline (the router's retry budget).",
            lambda v, n: check_int(v, n, 0, 10)),
    Setting("vllm_omni_router_request_timeout", DEPLOYMENT, 1800, "seconds",
            "Router timeout for one request (audio generation can take minutes).",
            lambda v, n: check_int(v, n, 10, 86400)),
    Setting("vllm_omni_router_cb_failure_threshold", DEPLOYMENT, 5, "int",
            "Consecutive failures that open a pipeline's circuit breaker (0 disables the breaker).",
            lambda v, n: check_int(v, n, 0, 1000)),
    Setting("vllm_omni_router_cb_timeout", DEPLOYMENT, 30, "seconds",
            "How long an open circuit breaker keeps a pipeline out before probing it again.",
            lambda v, n: check_int(v, n, 1, 3600)),
    Setting("vllm_omni_frontdoor_enabled", DEPLOYMENT, True, "bool",
            "Put a TLS front door (nginx from the distribution) on each router host: it terminates TLS on "
            "vllm_omni_router_port, checks the API key itself and forwards only the OpenAI routes (`/v1/...`) and "
            "`/health`, `/readiness` to vllm-router, which then listens on loopback only "
            "(vllm_omni_router_backend_port): its admin endpoints (`/add_worker`, `/remove_worker`, ...) are "
            "unreachable from other hosts. false: vllm-router itself on vllm_omni_router_port, plain HTTP.",
            check_bool),
    Setting("vllm_omni_router_backend_port", DEPLOYMENT, 18000, "port",
            "vllm-router's port on 127.0.0.1 behind the front door (only with vllm_omni_frontdoor_enabled).",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_tls_cert_file", DEPLOYMENT, None, "path (controller)",
            "The front door's certificate (PEM, leaf first, then its intermediates) on the controller; with "
            "vllm_omni_tls_key_file. It must name each router host's address (vllm_omni_ip) as an IP "
            "subjectAltName for the collection's own checks, which connect by address. Unset: the collection makes "
            "a CA and one certificate per router host on the controller ($VLLM_OMNI_CACHE/tls/; clients trust that "
            "CA's ca.pem, which make demo prints).",
            check_controller_file, default_doc="a certificate from the collection's own CA"),
    Setting("vllm_omni_tls_key_file", DEPLOYMENT, None, "path (controller)",
            "The private key of vllm_omni_tls_cert_file on the controller (PEM). Copied to the router hosts, "
            "0640 root:<the group nginx runs as: www-data on Debian and Ubuntu, nginx on RHEL>.",
            check_controller_file, default_doc="see vllm_omni_tls_cert_file"),
    Setting("vllm_omni_tls_ca_file", DEPLOYMENT, None, "path (controller)",
            "The CA (PEM) that issued vllm_omni_tls_cert_file, if clients do not already trust it (a private CA). "
            "The collection's checks verify the front door against it; unset: against the system's trust store.",
            check_controller_file, default_doc="the system's trust store"),
    Setting("vllm_omni_router_log_level", DEPLOYMENT, "info", "string",
            "Log level of the router process: debug, info, warning or error.",
            lambda v, n: check_choice(v, n, ("debug", "info", "warning", "error"))),
    Setting("vllm_omni_router_health_check_interval", DEPLOYMENT, 5, "seconds",
            "Router's interval between /health checks of each pipeline.",
            lambda v, n: check_int(v, n, 1, 600)),
    Setting("vllm_omni_api_key_required", DEPLOYMENT, True, "bool",
            "Require an API key on every request (enforced by the engines; clients send it through the router). "
            "false only for closed test networks.",
            check_bool),
    # Firewall role (nftables): only the ports of the plan, nothing else on the host.
    Setting("vllm_omni_firewall_enabled", DEPLOYMENT, True, "bool",
            "Install the nftables table `inet vllm_omni`: engine API, bootstrap and Mooncake ports (and the "
            "master's) accept only inventory hosts; the router port also accepts vllm_omni_router_client_cidrs, "
            "the Prometheus port vllm_omni_monitoring_client_cidrs. Other ports are not touched.",
            check_bool),
    Setting("vllm_omni_router_client_cidrs", DEPLOYMENT, [], "list of networks",
            "Client networks allowed to reach the router's API port (besides the inventory hosts). Empty: only "
            "the inventory hosts can. Behind the front door (the default) that port serves the OpenAI routes only; "
            "without it (vllm_omni_frontdoor_enabled: false) vllm-router's unauthenticated admin endpoints share it.",
            check_cidr_list),
    Setting("vllm_omni_monitoring_client_cidrs", DEPLOYMENT, [], "list of networks",
            "Networks allowed to reach Prometheus (and the router's metrics port) besides the inventory hosts.",
            check_cidr_list),
    Setting("vllm_omni_api_key", SECRET, None, "string (vault)",
            "The API key (`Authorization: Bearer ...`): the engines check it, and the front door accepts it from "
            "clients unless vllm_omni_api_keys is set (then it only sends it on to the engines). Keep it in Ansible "
            "Vault; it is written only to the hosts' 0640 engine.env and the front door's 0640 key map, never to the "
            "plan or the render directory.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9._~+/=-]{16,256}", "16-256 characters of A-Z a-z 0-9 . _ ~ + / = -",
                                   "a-long-random-string-from-vault"),
            default_doc="required when vllm_omni_api_key_required"),
    Setting("vllm_omni_api_keys", SECRET, [], "list of strings (vault)",
            "The keys clients may send to the front door, instead of vllm_omni_api_key: a key rotation lists the "
            "old and the new key, then the new one only (docs/security.md, \"Rotating the API key\"). Each is a "
            "bearer token like vllm_omni_api_key, at most 16 of them; the front door sends vllm_omni_api_key on to "
            "the engines whichever a client used, so a rotation reloads nginx and restarts no pipeline. Needs the "
            "front door. Empty: clients send vllm_omni_api_key.",
            default_doc="`[]` (clients send vllm_omni_api_key)"),
    Setting("vllm_omni_hf_token", SECRET, None, "string (vault)",
            "Hugging Face token for a gated or private model (vllm_omni_model_source `hub`). Used on the controller "
            "only, through the environment; never written to a host, the plan or the output.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9_-]{8,256}", "8-256 characters of A-Z a-z 0-9 _ -", "hf_...")),
    # Mooncake master (only for Mooncake store connectors; the PD path's MooncakeConnector needs none).
    Setting("vllm_omni_mooncake_master_enabled", DEPLOYMENT, False, "bool",
            "Run mooncake_master on the hosts of group vllm_omni_mooncake_master (default: the first engine host).",
            check_bool),
    Setting("vllm_omni_mooncake_master_rpc_port", DEPLOYMENT, 50051, "port", "mooncake_master RPC port.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_mooncake_master_metrics_port", DEPLOYMENT, 9003, "port",
            "mooncake_master HTTP port (/health, /metrics).", lambda v, n: check_int(v, n, 1024, 65535)),
    # Monitoring: Prometheus on the hosts of group vllm_omni_monitoring (default: the router host),
    # scraping every engine, router and Mooncake master target from the plan.
    Setting("vllm_omni_monitoring_enabled", DEPLOYMENT, False, "bool",
            "Install Prometheus (Debian/RHEL package) on the monitoring hosts with the plan's targets.",
            check_bool),
    Setting("vllm_omni_prometheus_port", DEPLOYMENT, 9090, "port", "Prometheus web/API port on the monitoring hosts.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_alert_ttft_seconds", DEPLOYMENT, 2.0, "seconds",
            "Alert rule TTFT objective: p99 time to first token of a pipeline over 10 minutes above this fires "
            "VllmOmniTTFTOverObjective.", lambda v, n: check_float(v, n, 0.0, 3600.0, low_open=True)),
    Setting("vllm_omni_alert_certificate_days", DEPLOYMENT, 14, "days",
            "Alert rule window: a front door certificate that expires in fewer days fires "
            "VllmOmniCertificateExpiresSoon (deploy renews the collection's own certificates within 30 days of expiry, "
            "so with 14 it fires only when no deploy ran in that time, or for your own certificate).",
            lambda v, n: check_int(v, n, 1, 365)),
    # Read by playbooks.
    Setting("vllm_omni_render_dir", PLAYBOOK, None, "path",
            "playbooks/render.yml: directory the plan and every pipeline's files are written to (controller).",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9._/~-]+", "a directory path", "/srv/vllm-omni-render"),
            default_doc="required by render.yml"),
    Setting("vllm_omni_uninstall_purge_models", PLAYBOOK, False, "bool",
            "playbooks/uninstall.yml: also remove the model cache (HF_HOME) and the service users' homes.",
            check_bool),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}


def _check_tp(value: Any, name: str) -> int:
    size = check_int(value, name, 1, 64)
    if size not in (1, 2, 4, 8):
        raise SettingError(f"is {size}; the Qwen3-Omni thinker splits over 1, 2, 4 or 8 GPUs",
                           f"set {name} to 1, 2, 4 or 8")
    return size
