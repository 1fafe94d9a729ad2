"""selinux_policy: port types and booleans made so only where they are not, against a host whose SELinux tools are
stood in for (semanage's listing format, getsebool's answers); nothing where SELinux is off."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.vllm_omni.serve.plugins.modules import selinux_policy

# semanage port -l -n as RHEL 9's targeted policy prints it (abridged): 8000 is typed for another service.
LISTING = """\
http_cache_port_t              tcp      8080, 8118, 8123, 10001-10010
http_port_t                    tcp      80, 81, 443, 488, 8008, 8009, 8443, 9000
rsync_port_t                   tcp      873
rsync_port_t                   udp      873
soundd_port_t                  tcp      8000, 9433, 16001
unreserved_port_t              tcp      61000-65535, 1024-32767
"""
DOOR = {"port": 8000, "proto": "tcp", "type": "http_port_t", "why": "nginx listens on the front door's port"}
PROXY = {"name": "httpd_can_network_connect", "value": True, "why": "nginx proxies to vllm-router"}


class Exit(Exception):
    def __init__(self, kind, result):
        super().__init__(kind)
        self.kind, self.result = kind, result


class Host:
    """A host's SELinux tools: which exist, the mode, the port records and the booleans; every command run."""

    def __init__(self, mode="Enforcing", tools=("selinuxenabled", "getenforce", "semanage", "getsebool", "setsebool")):
        self.mode, self.tools, self.listing = mode, set(tools), LISTING
        self.booleans = {"httpd_can_network_connect": False, "rsync_export_all_ro": False}
        self.commands: list[list[str]] = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return f"/usr/sbin/{name}" if name in self.tools else None

    def run_command(self, argv, **_kwargs):
        self.commands.append(list(argv))
        name, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        if name == "selinuxenabled":
            return (0 if self.mode != "Disabled" else 1), "", ""
        if name == "getenforce":
            return 0, f"{self.mode}\n", ""
        if name == "semanage" and args[:2] == ["port", "-l"]:
            return 0, self.listing, ""
        if name == "semanage" and args[0] == "port" and args[1] in ("-a", "-m"):
            kind, proto, port = args[3], args[5], args[6]
            self.listing += f"{kind:<30} {proto:<8} {port}\n"
            return 0, "", ""
        if name == "getsebool":
            if args[0] not in self.booleans:
                return 1, "", f"Error getting active value for {args[0]}\n"
            return 0, f"{args[0]} --> {'on' if self.booleans[args[0]] else 'off'}\n", ""
        if name == "setsebool":
            self.booleans[args[1]] = args[2] == "on"
            return 0, "", ""
        raise AssertionError(f"unexpected command {argv}")

    def changing(self):
        return [c for c in self.commands if c[0].endswith("setsebool") or (c[0].endswith("semanage") and c[2] != "-l")]


@pytest.fixture
def host(monkeypatch):
    stand_in = Host()
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", lambda self, **kw: (_never for _never in ()).throw(Exit("exit", kw)))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", lambda self, **kw: (_never for _never in ()).throw(Exit("fail", kw)))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, *a, **kw: stand_in.get_bin_path(*a, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: stand_in.run_command(argv, **kw))
    return stand_in


def call(ports=(), booleans=(), check_mode=False) -> Exit:
    args = {"ports": list(ports), "booleans": list(booleans)}
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(Exit) as done:
        selinux_policy.main()
    return done.value


def test_a_port_the_policy_types_otherwise_is_modified_and_the_boolean_set_once(host):
    first = call([DOOR], [PROXY])
    assert first.kind == "exit" and first.result["changed"] and first.result["mode"] == "enforcing"
    assert host.changing() == [["/usr/sbin/semanage", "port", "-m", "-t", "http_port_t", "-p", "tcp", "8000"],
                               ["/usr/sbin/setsebool", "-P", "httpd_can_network_connect", "on"]]
    assert first.result["changes"][0].startswith("port tcp/8000: http_port_t (was soundd_port_t)")
    host.commands.clear()
    again = call([DOOR], [PROXY])
    assert not again.result["changed"] and again.result["changes"] == [] and host.changing() == []


def test_a_port_without_a_record_of_its_own_is_added_even_inside_an_unreserved_range(host):
    result = call([{"port": 8873, "proto": "tcp", "type": "rsync_port_t", "why": "the fan-out's daemon"}])
    assert result.result["changed"]
    assert host.changing() == [["/usr/sbin/semanage", "port", "-a", "-t", "rsync_port_t", "-p", "tcp", "8873"]]


@pytest.mark.parametrize("port, kind", [(8443, "http_port_t"), (873, "rsync_port_t"), (10005, "http_cache_port_t")])
def test_a_port_already_of_its_type_by_record_or_range_is_left_alone(host, port, kind):
    result = call([{"port": port, "proto": "tcp", "type": kind}])
    assert not result.result["changed"] and host.changing() == []


def test_check_mode_says_what_it_would_change_and_changes_nothing(host):
    result = call([DOOR], [PROXY], check_mode=True)
    assert result.result["changed"] and len(result.result["changes"]) == 2
    assert host.changing() == [] and host.booleans["httpd_can_network_connect"] is False


@pytest.mark.parametrize("stand_in", [Host(mode="Disabled"), Host(tools=())])
def test_with_selinux_off_or_absent_nothing_is_read_or_changed(monkeypatch, host, stand_in):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, *a, **kw: stand_in.get_bin_path(*a, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: stand_in.run_command(argv, **kw))
    result = call([DOOR], [PROXY])
    assert result.result == {"changed": False, "mode": "disabled", "changes": []}
    assert all(c[0].endswith("selinuxenabled") for c in stand_in.commands)


def test_permissive_hosts_get_the_needs_too_so_that_enforcing_later_breaks_nothing(host):
    host.mode = "Permissive"
    result = call([DOOR], [PROXY])
    assert result.result["mode"] == "permissive" and result.result["changed"]


def test_enabled_without_semanage_fails_naming_the_package(host):
    host.tools.discard("semanage")
    result = call([DOOR])
    assert result.kind == "fail" and "policycoreutils-python-utils" in result.result["msg"]


def test_a_boolean_the_policy_lacks_fails_clearly(host):
    result = call(booleans=[{"name": "no_such_boolean", "value": True}])
    assert result.kind == "fail" and "no_such_boolean" in result.result["msg"]


def test_the_listing_parser_reads_records_and_ranges():
    types = selinux_policy.port_types(LISTING)
    assert types[("tcp", 8000)] == ["soundd_port_t"] and types[("udp", 873)] == ["rsync_port_t"]
    assert "unreserved_port_t 1024-32767" in types[("tcp", -1)]
    assert selinux_policy.port_action(types, 9000, "tcp", "http_port_t") is None
    assert selinux_policy.port_action(types, 9000, "tcp", "rsync_port_t") == "-m"
    assert selinux_policy.port_action(types, 12345, "udp", "rsync_port_t") == "-a"
    assert selinux_policy.boolean_value("httpd_can_network_connect --> on\n") is True
    assert selinux_policy.boolean_value("whatever") is None
