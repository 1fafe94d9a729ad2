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
that resolves to the key is caught here. Every answer names hosts and places, never a value.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

API_KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# Shorter values would match ordinary text by chance: not worth searching the plan for.
MIN_SEARCHED = 8


def _fingerprint(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def key_problems(keys: dict[str, object], required: bool) -> list[str]:
    """``keys``: host -> the key value (None: not set; an Exception: could not be read)."""
    problems, seen = [], {}
    for host, key in sorted(keys.items()):
        if isinstance(key, Exception):
            problems.append(f"{host} (vllm_omni_api_key could not be read: {type(key).__name__}; is the vault "
                            "password given and the variable it refers to defined?)")
        elif key is None or key == "":
            if required:
                problems.append(f"{host} (vllm_omni_api_key is not set)")
        elif not isinstance(key, str):
            problems.append(f"{host} (vllm_omni_api_key is a {type(key).__name__}, not a string)")
        elif not API_KEY.fullmatch(key):
            problems.append(f"{host} (vllm_omni_api_key {_why_not_a_key(key)})")
        else:
            seen.setdefault(_fingerprint(key), []).append(host)
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
        bad = False
        for index, key in enumerate(keys):
            if not isinstance(key, str):
                problems.append(f"{host} (vllm_omni_api_keys[{index}] is a {type(key).__name__}, not a string)")
                bad = True
            elif not API_KEY.fullmatch(key):
                problems.append(f"{host} (vllm_omni_api_keys[{index}] {_why_not_a_key(key)})")
                bad = True
        if bad:
            continue
        if len(keys) > MAX_KEYS:
            problems.append(f"{host} (vllm_omni_api_keys holds {len(keys)} keys; at most {MAX_KEYS})")
            continue
        fingerprints = [_fingerprint(key) for key in keys]
        twice = [str(i) for i, f in enumerate(fingerprints) if f in fingerprints[:i]]
        if twice:
            problems.append(f"{host} (vllm_omni_api_keys[{', '.join(twice)}] repeats an earlier key)")
            continue
        seen.setdefault(tuple(sorted(fingerprints)), []).append(host)
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the engine and router hosts hold different vllm_omni_api_keys ({groups}): every front "
                        "door must accept the same keys")
    if used and not required:
        problems.append("vllm_omni_api_keys is set but vllm_omni_api_key_required is false: nothing checks a key; "
                        "remove vllm_omni_api_keys or require the key")
    elif used and not frontdoor:
        problems.append("vllm_omni_api_keys needs the front door (vllm_omni_frontdoor_enabled): without it clients "
                        "reach vllm-router, which hands their key to the engines, and an engine checks one key "
                        "(vllm_omni_api_key) only")
    return problems


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


# What each TLS setting's file must hold (PEM): the certificate (chain), a private key, a CA.
TLS_MARKERS = {
    "vllm_omni_tls_cert_file": ("-----BEGIN CERTIFICATE-----", "a PEM certificate"),
    "vllm_omni_tls_key_file": ("PRIVATE KEY-----", "a PEM private key"),
    "vllm_omni_tls_ca_file": ("-----BEGIN CERTIFICATE-----", "a PEM CA certificate"),
}
TLS_FILE_MAX = 1 << 20  # a certificate chain or key is a few KiB; anything this big is the wrong file


def tls_file_problems(paths: dict[str, str | None], read=None) -> list[str]:
    """The operator's TLS files on the controller: there, readable, and PEM of the right kind.

    ``paths``: setting name -> controller path (None: not set). Never shows a file's contents.
    """
    read = read or (lambda path: Path(path).read_bytes())
    problems = []
    for name, path in sorted(paths.items()):
        if path is None:
            continue
        marker, what = TLS_MARKERS[name]
        try:
            if not Path(path).is_file():
                problems.append(f"{name} names {path}, which is not a file on the controller")
                continue
            if Path(path).stat().st_size > TLS_FILE_MAX:
                problems.append(f"{name} names {path}, which is larger than 1 MiB: not {what}")
                continue
            text = read(path).decode("ascii", errors="replace")
        except OSError as error:
            problems.append(f"{name} names {path}, which cannot be read on the controller ({error.strerror})")
            continue
        if marker not in text:
            problems.append(f"{name} names {path}, which does not hold {what}")
    return problems
