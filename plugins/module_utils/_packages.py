# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Whether the distribution packages a host needs are installed, or installable from its own package sources
(preflight_facts): dpkg and apt's local lists on Debian and Ubuntu, rpm and dnf on the RHEL family."""

from __future__ import annotations

INSTALLED, INSTALLABLE, UNAVAILABLE, UNKNOWN = "installed", "installable", "unavailable", "unknown"


def installed_from_query(output: str) -> set[str]:
    """Names from ``dpkg-query -W -f '${Package} ${db:Status-Status}\\n'`` or ``rpm -q --qf '%{NAME} installed\\n'``
    whose status is installed (dpkg also lists removed packages with their configuration left: not installed)."""
    names = set()
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == "installed":
            names.add(fields[0].split(":")[0])  # a multi-arch name: libfoo:amd64
    return names


def candidates_from_apt_policy(output: str) -> set[str]:
    """Names that ``apt-cache policy NAME...`` gives a candidate version (not ``(none)``): installable from the host's
    configured sources as its local lists know them. A name apt knows nothing of prints no block."""
    names, current = set(), None
    for line in output.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1].split(":")[0]
        elif current and line.strip().startswith("Candidate:"):
            if line.split(":", 1)[1].strip() not in ("(none)", ""):
                names.add(current)
            current = None
    return names


def available_from_dnf_list(output: str) -> set[str]:
    """Names in ``dnf -q list --available NAME...``: lines of ``name.arch  version  repository``."""
    names = set()
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 3 and "." in fields[0] and not line.startswith(("Available", "Installed")):
            names.add(fields[0].rsplit(".", 1)[0])
    return names


def package_states(module, names: list[str]) -> dict[str, str]:
    """name -> installed, installable, unavailable, or unknown (no package tool this module knows)."""
    if not names:
        return {}
    locale = {"LANGUAGE": "C", "LC_ALL": "C"}
    dpkg, rpm = module.get_bin_path("dpkg-query"), module.get_bin_path("rpm")
    if dpkg:
        _rc, out, _err = module.run_command([dpkg, "-W", "-f", "${Package} ${db:Status-Status}\n", *names],
                                            environ_update=locale)
        have = installed_from_query(out)
        missing = [name for name in names if name not in have]
        tool = module.get_bin_path("apt-cache")
        offered = candidates_from_apt_policy(module.run_command([tool, "policy", *missing], environ_update=locale)[1]) \
            if tool and missing else set()
    elif rpm:
        _rc, out, _err = module.run_command([rpm, "-q", "--qf", "%{NAME} installed\n", *names], environ_update=locale)
        have = installed_from_query(out)
        missing = [name for name in names if name not in have]
        tool = module.get_bin_path("dnf") or module.get_bin_path("yum")
        # dnf reads (and may refresh) the repositories' metadata: bounded, an unreachable mirror must not hang here.
        timeout = module.get_bin_path("timeout")
        argv = ([timeout, "120"] if timeout else []) + [tool or "dnf", "-q", "list", "--available", *missing]
        offered = available_from_dnf_list(module.run_command(argv, environ_update=locale)[1]) \
            if tool and missing else set()
    else:
        return dict.fromkeys(names, UNKNOWN)
    if missing and not tool:
        return {name: INSTALLED if name in have else UNKNOWN for name in names}
    return {name: INSTALLED if name in have else INSTALLABLE if name in offered else UNAVAILABLE for name in names}
