"""Whether a host's distribution packages are installed or installable, from the package tools' own output
(preflight_facts): dpkg/apt on Debian and Ubuntu, rpm/dnf on the RHEL family."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.module_utils import _packages

# apt-cache policy on a Debian 12 host (this machine's words): rsync installed, libcurl4 with a newer candidate,
# nginx known to the lists but not installed, a package only in dpkg's status (no source), one apt does not know.
APT_POLICY = """rsync:
  Installed: 3.5.0+ds1-0+deb12u1
  Candidate: 3.5.0+ds1-0+deb12u1
  Version table:
 *** 3.5.0+ds1-0+deb12u1 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
        100 /var/lib/dpkg/status
nginx:
  Installed: (none)
  Candidate: 1.22.1-9+deb12u3
  Version table:
     1.22.1-9+deb12u3 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
libibverbs1:
  Installed: (none)
  Candidate: (none)
  Version table:
"""

DNF_LIST = """Available Packages
nginx.x86_64                          2:1.20.1-20.el9_6.3                   appstream
librdmacm.x86_64                      54.0-1.el9                            baseos
"""


class Module:
    """AnsibleModule's run_command and get_bin_path, answering from canned outputs."""

    def __init__(self, tools: dict[str, str], outputs: dict[str, str]):
        self.tools, self.outputs, self.calls = tools, outputs, []

    def get_bin_path(self, name, opt_dirs=None):
        return self.tools.get(name)

    def run_command(self, argv, environ_update=None):
        self.calls.append(argv)
        tool = next(word for word in argv if word in self.outputs)
        return 0, self.outputs[tool], ""


def test_dpkg_status_counts_only_installed_packages():
    assert _packages.installed_from_query("rsync installed\nnginx config-files\nlibcurl4:amd64 installed\n") == \
        {"rsync", "libcurl4"}


def test_apt_policy_gives_the_names_with_a_candidate():
    assert _packages.candidates_from_apt_policy(APT_POLICY) == {"rsync", "nginx"}


def test_dnf_list_gives_the_available_names_without_their_architecture():
    assert _packages.available_from_dnf_list(DNF_LIST) == {"nginx", "librdmacm"}


def test_a_debian_host_s_states_and_the_air_gapped_one():
    module = Module({"dpkg-query": "/usr/bin/dpkg-query", "apt-cache": "/usr/bin/apt-cache"},
                    {"/usr/bin/dpkg-query": "rsync installed\n", "/usr/bin/apt-cache": APT_POLICY})
    states = _packages.package_states(module, ["rsync", "nginx", "libibverbs1", "not-known-to-apt"])
    assert states == {"rsync": "installed", "nginx": "installable", "libibverbs1": "unavailable",
                      "not-known-to-apt": "unavailable"}
    # apt is asked about the missing ones only.
    assert module.calls[-1] == ["/usr/bin/apt-cache", "policy", "nginx", "libibverbs1", "not-known-to-apt"]


def test_a_rhel_host_asks_dnf_within_a_bound():
    module = Module({"rpm": "/usr/bin/rpm", "dnf": "/usr/bin/dnf", "timeout": "/usr/bin/timeout"},
                    {"/usr/bin/rpm": "rsync installed\npackage nginx is not installed\n", "/usr/bin/dnf": DNF_LIST})
    states = _packages.package_states(module, ["rsync", "nginx", "golang-github-prometheus"])
    assert states == {"rsync": "installed", "nginx": "installable", "golang-github-prometheus": "unavailable"}
    assert module.calls[-1][:3] == ["/usr/bin/timeout", "120", "/usr/bin/dnf"]


def test_all_installed_asks_no_package_source_and_no_tool_at_all_is_unknown():
    module = Module({"dpkg-query": "/usr/bin/dpkg-query", "apt-cache": "/usr/bin/apt-cache"},
                    {"/usr/bin/dpkg-query": "rsync installed\nnginx installed\n", "/usr/bin/apt-cache": ""})
    assert _packages.package_states(module, ["rsync", "nginx"]) == {"rsync": "installed", "nginx": "installed"}
    assert len(module.calls) == 1
    assert _packages.package_states(Module({}, {}), ["rsync"]) == {"rsync": "unknown"}
    assert _packages.package_states(Module({}, {}), []) == {}
