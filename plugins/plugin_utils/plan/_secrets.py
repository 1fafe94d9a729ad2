# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The secrets, checked on the controller before any host is touched, without ever showing them.

The planner never reads a secret (planning and rendering need no vault password). Before a
deploy, this module gets the secret values once: the API key must be an HTTP bearer token (no
whitespace, no trailing newline from ``echo KEY | ansible-vault encrypt_string``), the same on
every engine host, and no secret value may appear anywhere in the plan, which ends up in argv,
environment files, ``plan.json`` and the render directory. A Jinja value in an ordinary setting
that resolves to the key is caught here. Every answer names hosts and places, never a value. The operator's TLS
files are checked by ``_tls_material``.
"""

from __future__ import annotations

import hashlib
import re

from ._problems import Refusal

API_KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# Shorter values would match ordinary text by chance: not worth searching the plan for.
MIN_SEARCHED = 8


def _fingerprint(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def _read_values(name: str, values: dict[str, object], pattern: re.Pattern, why_not) -> tuple[list, dict, list]:
    """One secret's value on each host, sorted into (problems, {fingerprint: hosts}, hosts where it is unset).
    ``values``: host -> value (None or "": not set; an Exception: could not be read). Never shows a value."""
    problems, seen, unset = [], {}, []
    for host, value in sorted(values.items()):
        if isinstance(value, Exception):
            problems.append(f"{host} ({name} could not be read: {type(value).__name__}; is the vault password given "
                            "and the variable it refers to defined?)")
        elif value is None or value == "":
            unset.append(host)
        elif not isinstance(value, str):
            problems.append(f"{host} ({name} is a {type(value).__name__}, not a string)")
        elif not pattern.fullmatch(value):
            problems.append(f"{host} ({name} {why_not(value)})")
        else:
            seen.setdefault(_fingerprint(value), []).append(host)
    return problems, seen, unset


def key_problems(keys: dict[str, object], required: bool) -> list[str]:
    """``keys``: host -> the key value (None: not set; an Exception: could not be read)."""
    problems, seen, unset = _read_values("vllm_omni_api_key", keys, API_KEY, _why_not_a_key)
    if required and unset and seen:  # set where the engines are, not where the router is: a group_vars file
        holders = sorted(host for hosts in seen.values() for host in hosts)
        problems.append(Refusal(
            f"vllm_omni_api_key is set on {', '.join(holders)[:80]} but not on {', '.join(unset)[:80]}",
            "set vllm_omni_api_key once for every host, in group_vars/all.yml (vaulted): the router hosts outside "
            "group vllm_omni do not read group_vars/vllm_omni.yml"))
    elif required:
        problems += [f"{host} (vllm_omni_api_key is not set)" for host in unset]
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the engine and router hosts hold different API keys ({groups}): the front door checks a "
                        "client's key and the router sends it on to any pipeline, so they must be one key")
    return problems


MAX_KEYS = 16  # a rotation needs two; a handful of client groups with keys of their own is plenty


def _why_not_a_key(key: str) -> str:
    return ("ends with a newline or space" if key != key.rstrip() else
            "is shorter than 16 characters" if len(key) < 16 else
            "is longer than 256 characters" if len(key) > 256 else
            "holds characters other than A-Z a-z 0-9 . _ ~ + / = -")


def key_set_problems(key_sets: dict[str, object], required: bool, frontdoor: bool) -> list[str]:
    """``vllm_omni_api_keys`` per host: the keys clients may send to the front door (None or []: not set).

    Each entry is a bearer token, none twice, at most MAX_KEYS, and every host holds the same set (in
    any order). The set needs a required key and the front door (nginx checks it; the engines check
    only vllm_omni_api_key, which the door sends on). Problems name hosts and positions, never a value.
    """
    problems, seen, used = [], {}, []
    for host, keys in sorted(key_sets.items()):
        if isinstance(keys, Exception):
            problems.append(f"{host} (vllm_omni_api_keys could not be read: {type(keys).__name__}; is the vault "
                            "password given and the variable it refers to defined?)")
            continue
        if keys is None or keys == []:
            seen.setdefault((), []).append(host)
            continue
        if isinstance(keys, str) or not isinstance(keys, list):
            problems.append(f"{host} (vllm_omni_api_keys is a {type(keys).__name__}, not a list of keys; write "
                            "vllm_omni_api_keys: [<old key>, <new key>], each vaulted)")
            continue
        used.append(host)
        host_problems, fingerprints = _host_key_set(host, keys)
        problems += host_problems
        if fingerprints is not None:
            seen.setdefault(fingerprints, []).append(host)
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the engine and router hosts hold different vllm_omni_api_keys ({groups}): every front "
                        "door must accept the same keys")
    return problems + _key_set_use_problems(bool(used), required, frontdoor)


def _host_key_set(host: str, keys: list) -> tuple[list[str], tuple | None]:
    """(problems, the set's sorted fingerprints, None when it has a problem) of one host's list of keys."""
    problems = []
    for index, key in enumerate(keys):
        if not isinstance(key, str):
            problems.append(f"{host} (vllm_omni_api_keys[{index}] is a {type(key).__name__}, not a string)")
        elif not API_KEY.fullmatch(key):
            problems.append(f"{host} (vllm_omni_api_keys[{index}] {_why_not_a_key(key)})")
    if problems:
        return problems, None
    if len(keys) > MAX_KEYS:
        return [f"{host} (vllm_omni_api_keys holds {len(keys)} keys; at most {MAX_KEYS})"], None
    fingerprints = [_fingerprint(key) for key in keys]
    twice = [str(i) for i, f in enumerate(fingerprints) if f in fingerprints[:i]]
    if twice:
        return [f"{host} (vllm_omni_api_keys[{', '.join(twice)}] repeats an earlier key)"], None
    return [], tuple(sorted(fingerprints))


def _key_set_use_problems(used: bool, required: bool, frontdoor: bool) -> list[str]:
    """A key set needs a required key and the front door: nothing else checks it."""
    if used and not required:
        return ["vllm_omni_api_keys is set but vllm_omni_api_key_required is false: nothing checks a key; "
                "remove vllm_omni_api_keys or require the key"]
    if used and not frontdoor:
        return ["vllm_omni_api_keys needs the front door (vllm_omni_frontdoor_enabled): without it clients "
                "reach vllm-router, which hands their key to the engines, and an engine checks one key "
                "(vllm_omni_api_key) only"]
    return []


def _places(value, needle: str, path: str = "plan") -> list[str]:
    if isinstance(value, str):
        return [path] if needle in value else []
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _places(item, needle, f"{path}.{key}")
                + ([f"{path} (a key)"] if isinstance(key, str) and needle in key else [])]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _places(item, needle, f"{path}[{index}]")]
    return []


def leaks(plan: dict, secrets: dict[str, str]) -> list[str]:
    """Where in the plan a secret value appears (``secrets``: variable name -> value)."""
    found = []
    for name, value in sorted(secrets.items()):
        if isinstance(value, str) and len(value) >= MIN_SEARCHED:
            places = _places(plan, value)
            if places:
                shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
                found.append(f"the value of {name} appears in {shown}: it would reach argv, environment files, "
                             "plan.json or the render directory")
    return found


# --- every other secret: one model (format, one value for the deployment, never shown) -----------------

# A Hugging Face token: hf_ and letters/digits in practice; any 8-256 of A-Z a-z 0-9 _ - (a mirror's own tokens).
HF_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,256}")
SECRET_FORMATS = {
    "vllm_omni_hf_token": (HF_TOKEN, "A-Z a-z 0-9 _ -"),
    "engine_hf_token": (HF_TOKEN, "A-Z a-z 0-9 _ -"),
}


def _why_not(value: str, pattern: re.Pattern, alphabet: str) -> str:
    low, high = (int(n) for n in re.search(r"\{(\d+),(\d+)\}", pattern.pattern).groups())
    return ("ends with a newline or space (echo's newline in `echo TOKEN | ansible-vault encrypt_string`?)"
            if value != value.rstrip() else
            "starts with a space or newline" if value != value.lstrip() else
            f"is shorter than {low} characters" if len(value) < low else
            f"is longer than {high} characters" if len(value) > high else
            f"holds characters other than {alphabet}")


def secret_problems(name: str, values: dict[str, object]) -> list[str]:
    """One secret (not the API key, which has its own rules) on the hosts that read it: ``values`` host -> value
    (None or "": not set; an Exception: could not be read). Set everywhere or nowhere, one value, well formed.
    Problems name hosts, never a value."""
    pattern, alphabet = SECRET_FORMATS[name]
    problems, seen, unset = _read_values(name, values, pattern, lambda value: _why_not(value, pattern, alphabet))
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the hosts hold different values of {name} ({groups}): it is one value for the deployment, "
                        "and only one of them would be used")
    if seen and unset:
        problems.append(f"{name} is set on {', '.join(h for hs in seen.values() for h in hs)[:80]} but not on "
                        f"{', '.join(unset)[:80]}: it is one value for the deployment")
    return problems
