# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Host platforms (``data/platforms.yml``): which OS, Python, glibc and machine each lock is made for.

A platform is what a host's venvs are built against: the distribution's own interpreter (its path
and version), the oldest manylinux tag its glibc loads, and the machine. ``make lock`` makes one lock
per venv and platform; the planner gives every host of a deployment its platform (named with
``vllm_omni_host_platform``, or matched from the OS discovery reads); preflight checks the host is
what its platform says. Nothing else lists platforms.
"""

from __future__ import annotations

import functools

from . import _engine_data

DEFAULT = "debian12"  # what a host is assumed to run before discovery has looked (render, first plan pass)
AUTO = "auto"


@functools.cache
def _table() -> dict:
    return _engine_data._load_yaml(_engine_data.DATA_DIR / "platforms.yml")


def platform_ids() -> list[str]:
    return list(_table()["platforms"])


def unsupported_machines() -> dict[str, str]:
    return {machine: " ".join(str(why).split()) for machine, why in _table()["unsupported_machines"].items()}


def driver_floor(cuda_major: int) -> str | None:
    """The oldest NVIDIA driver the locked torch's CUDA major runs on, e.g. ``580.65.06``."""
    return _table()["driver_floor"].get(str(cuda_major))


def _pip_platforms(machine: str, glibc: str) -> list[str]:
    """Every platform tag a host with this glibc loads, newest first (pip download --platform takes each literally)."""
    newest = int(glibc.split(".")[1])
    return ([f"manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)]
            + [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"])


@functools.cache
def target(platform_id: str) -> dict:
    """What one platform's locks are made for and its venvs are built with (the plan's ``platforms`` entry)."""
    row = _table()["platforms"][platform_id]
    python = str(row["python"])
    return {
        "id": platform_id,
        "name": row["name"],
        "interpreter": row["interpreter"],
        "python": python,
        "machine": row["machine"],
        "glibc": str(row["glibc"]),
        "venv_package": row["venv_package"],
        "web_group": row["web_group"],
        "unprivileged_group": row["unprivileged_group"],
        "selinux": bool(row.get("selinux", False)),
        "uv_platform": row["uv_platform"],
        "pip_platforms": _pip_platforms(row["machine"], str(row["glibc"])),
        "implementation": "cp",
        "abi": "cp" + python.replace(".", ""),
    }


def packages(platform_id: str) -> dict[str, list[str]]:
    """The distribution packages each part of the collection installs on a host of the platform (part -> names)."""
    return {part: list(names) for part, names in _table()["platforms"][platform_id]["packages"].items()}


def version_tuple(text: str | None) -> tuple[int, ...]:
    """``"2.36"`` -> ``(2, 36)``; ``"580.65.06"`` -> ``(580, 65, 6)``; unparsable parts stop the tuple."""
    parts = []
    for part in str(text or "").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def match(os_facts: dict | None) -> str | None:
    """The platform whose ``match`` rows name this host's distribution and major version, or None."""
    if not os_facts:
        return None
    distribution, major = str(os_facts.get("distribution", "")), str(os_facts.get("major", ""))
    for platform_id, row in _table()["platforms"].items():
        if any(distribution == rule["distribution"] and major == rule["major"] for rule in row["match"]):
            return platform_id
    return None


def describe_os(os_facts: dict | None) -> str:
    if not os_facts:
        return "an OS discovery did not read"
    return f"{os_facts.get('distribution', '?')} {os_facts.get('version') or os_facts.get('major', '?')} " \
           f"({os_facts.get('machine', '?')})"
