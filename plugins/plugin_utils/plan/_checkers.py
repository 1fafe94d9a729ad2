# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""A row of the settings table (``Setting``) and its value checkers (the table is ``data/settings.yml``, loaded
by ``_settings``; the path checkers are ``_path_checks``): each returns the normalized value or raises
``SettingError`` with what is wrong and what to write instead; ``show`` and ``type_name`` word a value for
a problem line."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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


def check_max_unavailable(value: Any, name: str) -> int | str:
    """A count of pipelines (at least 1) or a share of the serving ones, ``"25%"`` (1-100)."""
    if isinstance(value, str):
        if re.fullmatch(r"([1-9][0-9]?|100)%", value.strip()):
            return value.strip()
        raise SettingError(f"is {show(value)}, neither a count nor a percentage",
                           f'write a whole number of pipelines ({name}: 1) or a share of them ({name}: "25%")')
    if isinstance(value, float) and not isinstance(value, bool) and 0 < value < 1:
        raise SettingError(f"is {value}, a fraction",
                           f'write the share as a percentage ({name}: "{max(1, int(value * 100))}%") or a whole number '
                           f"of pipelines ({name}: 1)")
    try:
        return check_int(value, name, 1, 100000)
    except SettingError as error:  # the same problem, with both forms the setting takes in the fix
        raise SettingError(error.problem, f'{error.fix.rstrip(".")}; or a share of the serving pipelines '
                                          f'({name}: "25%")') from None


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


def check_tp(value: Any, name: str) -> int:
    size = check_int(value, name, 1, 64)
    if size not in (1, 2, 4, 8):
        raise SettingError(f"is {size}; the Qwen3-Omni thinker splits over 1, 2, 4 or 8 GPUs",
                           f"set {name} to 1, 2, 4 or 8")
    return size


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
