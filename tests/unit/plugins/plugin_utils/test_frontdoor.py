"""The router's TLS front door in the plan: nginx's site, the key map, TLS sources, the footprint."""

from __future__ import annotations

import re

import pytest
from unitlib import inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _host_files
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree


def with_router(**settings):
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}}, settings, router=["edge"])
    inv["hostvars"]["edge"] = {"ansible_host": "10.0.0.5"}
    return inv


def nginx_regex(entry: str, upstream: str | None = None) -> re.Pattern:
    """The map entry's regular expression, as nginx reads it ("~" = case-sensitive)."""
    match = re.fullmatch(r'"~(.*)" "Bearer ([^"]*)";\n', entry)
    assert match, entry
    assert upstream is None or match.group(2) == upstream
    return re.compile(match.group(1))


def nginx_map(text: str, header: str) -> str:
    """What nginx's map gives for an Authorization header: the first matching entry's value, else ""."""
    for entry in text.splitlines(keepends=True):
        match = re.fullmatch(r'"~(.*)" "([^"]*)";\n', entry)
        assert match, entry
        if re.search(match.group(1), header):
            return match.group(2)
    return ""


@pytest.mark.parametrize("key", ["abcdefghijklmnopqrstuvwxyz", "Ab.C+d/E=f~g-h_i0123456789==", "a" * 256])
def test_the_key_map_matches_exactly_the_key_and_case_counts(key):
    pattern = nginx_regex(_host_files.frontdoor_key_map(key))
    assert pattern.fullmatch(f"Bearer {key}")
    for wrong in (f"Bearer {key.swapcase()}", f"Bearer {key}x", f"Bearer {key[:-1]}", f"bearer {key}", key,
                  f"Bearer {key.replace('.', 'X')}" if "." in key else f"Bearer x{key}"):
        if wrong != f"Bearer {key}":
            assert not pattern.search(wrong), wrong


def test_the_key_map_refuses_what_is_not_a_bearer_token():
    for bad in ("short", "abcdefghijklmnopq\n", 'abcdefghijklmnop"; }', "abcdefghijklmnopq$1"):
        with pytest.raises(ValueError, match="not a bearer token"):
            _host_files.frontdoor_key_map(bad)
        with pytest.raises(ValueError, match="not a bearer token"):  # in a set, or as the key sent on
            _host_files.frontdoor_key_map(["old-key-0123456789", bad], "old-key-0123456789")
        with pytest.raises(ValueError, match="not a bearer token"):
            _host_files.frontdoor_key_map(["old-key-0123456789"], bad)
    with pytest.raises(ValueError, match="no key given"):
        _host_files.frontdoor_key_map([], "old-key-0123456789")
    with pytest.raises(ValueError, match="no upstream key"):
        _host_files.frontdoor_key_map(["old-key-0123456789", "new-key-0123456789"])


def test_a_key_set_accepts_each_key_and_sends_the_engines_key_on():
    old, new, engines = "old-key-0123456789", "New.Key+/=~_-0123456789", "engine-key-0123456789"
    text = _host_files.frontdoor_key_map([old, new, old], engines)  # a repeat is written once
    assert text.count("\n") == 2
    for key in (old, new):
        assert nginx_map(text, f"Bearer {key}") == f"Bearer {engines}"
    for wrong in (f"Bearer {engines}", f"Bearer {new.swapcase()}", f"Bearer {old}x", f"bearer {old}", old, ""):
        assert nginx_map(text, wrong) == "", wrong
    # One key alone (no rotation): clients send the engines' own key, sent on unchanged.
    assert nginx_map(_host_files.frontdoor_key_map(old), f"Bearer {old}") == f"Bearer {old}"


def test_the_site_listens_with_tls_checks_the_key_and_forwards_openai_routes_only():
    plan = build_plan(with_router())
    site = render_tree(plan)["edge/frontdoor/vllm-omni.conf"]
    assert "listen 10.0.0.5:8000 ssl;" in site
    assert "include /etc/nginx/vllm-omni/api-keys.map;" in site
    assert 'if ($vllm_omni_upstream_authorization = "") { return 401' in site
    # The engines get the key they check, whichever accepted key the client sent.
    assert "proxy_set_header Authorization $vllm_omni_upstream_authorization;" in site.split("location /v1/", 1)[1]
    assert site.count("proxy_pass http://127.0.0.1:18000;") == 3  # /v1/, /health, /readiness
    assert "location / { return 404" in site
    assert "$http_authorization" not in site.split("log_format", 1)[1].split(";", 1)[0]  # the log never holds it
    # The door's own /metrics: the certificate's expiry, a file the role writes (no proxying, no key).
    metrics = site.split("location = /metrics {", 1)[1].split("}", 1)[0]
    assert "alias /etc/nginx/vllm-omni/metrics.prom;" in metrics and "proxy_pass" not in metrics
    frontdoor = plan["router"]["frontdoor"]
    assert frontdoor["tls"] == {"source": "generated", "cert_file": None, "key_file": None, "ca_file": None,
                                "certificate_days": 825, "renew_days": 30}
    assert frontdoor["ca"] == "/etc/nginx/vllm-omni/ca.pem"
    files = {f["path"]: f for f in plan["footprint"]["edge"]["files"] if f["component"] == "frontdoor"}
    assert files["/etc/nginx/vllm-omni/server.key"]["mode"] == "0640"
    assert files["/etc/nginx/vllm-omni/api-keys.map"]["group"] == "www-data"
    assert files["/etc/nginx/conf.d/vllm-omni.conf"]["render"] == "edge/frontdoor/vllm-omni.conf"
    assert files["/etc/nginx/vllm-omni/metrics.prom"]["render"] is None  # written by the role from the certificate


@pytest.mark.parametrize("door", [True, False])
def test_a_roll_asks_the_router_on_loopback_first_then_on_its_public_port_whatever_the_door(door):
    """A deploy turning the door on or off rolls pipelines before the router moves: the running router may be at
    either address, and while a door runs its public port answers for the door (plain HTTP there is nginx's 400)."""
    router = build_plan(with_router(vllm_omni_frontdoor_enabled=door))["router"]["per_host"]["edge"]
    behind_door, public = "http://127.0.0.1:18000", "http://10.0.0.5:8000"
    assert router["admin_url"] == (behind_door if door else public)
    assert router["roll_admin_urls"] == [behind_door, public]


def test_plain_paths_only_reach_the_router():
    site = render_tree(build_plan(with_router()))["edge/frontdoor/vllm-omni.conf"]
    guard = re.search(r'if \(\$request_uri ~ "(.*?)"\)', site).group(1).replace("\\\\", "\\")
    for refused in ("/v1/../add_worker", "/v1/%2e%2e/add_worker", "/v1//models", "/v1/./models"):
        assert re.search(guard, refused), refused
    for passed in ("/v1/chat/completions", "/v1/models?x=%20", "/v1/models/qwen2.5-omni"):
        assert not re.search(guard, passed), passed


def test_without_a_required_key_there_is_no_key_map():
    plan = build_plan(with_router(vllm_omni_api_key_required=False))
    assert plan["router"]["frontdoor"]["api_keys"] is None
    site = render_tree(plan)["edge/frontdoor/vllm-omni.conf"]
    assert "api-keys.map" not in site and "proxy_set_header Authorization" not in site
    assert not any(f["path"].endswith("api-keys.map") for f in plan["footprint"]["edge"]["files"])


def test_an_operator_certificate_with_and_without_a_private_ca():
    tls = {"vllm_omni_tls_cert_file": "/srv/pki/router.pem", "vllm_omni_tls_key_file": "/srv/pki/router.key"}
    public = build_plan(with_router(**tls))["router"]["frontdoor"]
    assert public["tls"]["source"] == "provided" and public["ca"] is None  # checked against the system's store
    private = build_plan(with_router(**tls, vllm_omni_tls_ca_file="/srv/pki/ca.pem"))["router"]["frontdoor"]
    assert private["ca"] == "/etc/nginx/vllm-omni/ca.pem" and private["tls"]["ca_file"] == "/srv/pki/ca.pem"


@pytest.mark.parametrize(("settings", "fragments"), [
    ({"vllm_omni_tls_cert_file": "/srv/pki/router.pem"}, ["vllm_omni_tls_key_file", "needs both"]),
    ({"vllm_omni_tls_ca_file": "/srv/pki/ca.pem"}, ["vllm_omni_tls_ca_file", "without vllm_omni_tls_cert_file"]),
    ({"vllm_omni_tls_cert_file": "/srv/pki/a.pem", "vllm_omni_tls_key_file": "/srv/pki/a.key",
      "vllm_omni_frontdoor_enabled": False}, ["vllm_omni_tls_cert_file", "nothing would use it"]),
    ({"vllm_omni_tls_key_file": "relative/a.key", "vllm_omni_tls_cert_file": "/srv/pki/a.pem"},
     ["vllm_omni_tls_key_file", "absolute path on the controller"]),
    ({"vllm_omni_router_backend_port": 8000}, ["vllm_omni_router_port", "vllm_omni_router_backend_port", "collide"]),
])
def test_tls_settings_that_cannot_work_are_refused(settings, fragments):
    [line] = problems_of(with_router(**settings))
    position = 0
    for fragment in fragments:  # each fragment, in this order
        assert fragment in line[position:], (fragment, line)
        position = line.index(fragment, position) + len(fragment)


def test_a_router_host_with_a_deployment_setting_of_its_own_is_refused_the_same_value_is_fine():
    inv = with_router()
    inv["hostvars"]["edge"]["vllm_omni_router_port"] = 9000
    [line] = problems_of(inv)
    assert line.startswith("host edge") and "where it is 8000" in line
    inv["hostvars"]["edge"]["vllm_omni_router_port"] = 8000  # group_vars/all gives every host the same value
    build_plan(inv)


def test_engine_host_settings_on_a_router_only_host_are_warned_about():
    inv = with_router()
    inv["hostvars"]["edge"]["vllm_omni_gpus"] = [0, 1]
    assert "host edge runs no pipeline, so vllm_omni_gpus is not read there" in build_plan(inv)["warnings"]


def test_the_render_root_holds_the_hosts_and_the_shared_names_only():
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._hosts import RENDER_SHARED_NAMES
    plan = build_plan(with_router(vllm_omni_monitoring_enabled=True))
    roots = {key.split("/", 1)[0] for key in render_tree(plan)}
    assert roots - set(plan["footprint"]) == RENDER_SHARED_NAMES
