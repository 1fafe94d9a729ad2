"""Router and Mooncake master in the plan: argv, ports, collisions, and secrets kept out."""

from __future__ import annotations

import json

from testlib import load_ansible_inventory
from unitlib import REPO, inventory, one_host, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree


def two_hosts_and_router(**settings):
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6))},
                     "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": list(range(3))}}, settings,
                    router=["edge"])
    inv["hostvars"]["edge"] = {"ansible_host": "10.0.0.5"}
    return inv


def test_router_fronts_every_pipeline_of_every_host():
    plan = build_plan(two_hosts_and_router())
    router = plan["router"]
    assert router["hosts"] == ["edge"] and router["defaulted"] is False
    argv = router["per_host"]["edge"]["argv"]
    # Behind the front door (on by default): vllm-router on loopback, nginx on the router port.
    assert argv[:5] == ["/opt/vllm-omni/venvs/vllm-router-0.1.17/bin/vllm-router", "--host", "127.0.0.1", "--port",
                        "18000"]
    urls = argv[argv.index("--worker-urls") + 1:argv.index("--policy")]
    assert urls == ["http://10.0.0.11:8091", "http://10.0.0.11:8092", "http://10.0.0.12:8091"] == plan["worker_urls"]
    assert argv[argv.index("--prometheus-host") + 1] == "10.0.0.5"
    assert "--retry-max-retries" in argv and "--cb-failure-threshold" in argv
    assert router["per_host"]["edge"]["url"] == "https://10.0.0.5:8000"
    assert router["per_host"]["edge"]["admin_url"] == "http://127.0.0.1:18000"


def test_without_the_front_door_the_router_listens_on_its_address_in_plain_http():
    router = build_plan(two_hosts_and_router(vllm_omni_frontdoor_enabled=False))["router"]
    argv = router["per_host"]["edge"]["argv"]
    assert argv[1:5] == ["--host", "10.0.0.5", "--port", "8000"]
    assert router["per_host"]["edge"]["url"] == router["per_host"]["edge"]["admin_url"] == "http://10.0.0.5:8000"
    assert router["frontdoor"]["enabled"] is False and router["frontdoor"]["tls"] is None
    assert all(r["purpose"] != "backend" for r in router["listen_ports"]["edge"])
    warnings = build_plan(two_hosts_and_router(vllm_omni_frontdoor_enabled=False))["warnings"]
    assert any("vllm_omni_frontdoor_enabled is false" in w and "plain HTTP" in w for w in warnings)


def test_the_generated_certificates_lifetime_and_renewal_window_are_the_plan_s():
    tls = build_plan(one_host())["router"]["frontdoor"]["tls"]
    assert tls["source"] == "generated" and (tls["certificate_days"], tls["renew_days"]) == (825, 30)
    # An alert window inside a longer renewal window: the alert fires only when no deploy renewed in time.
    plan = build_plan(one_host(vllm_omni_tls_certificate_days=90, vllm_omni_tls_certificate_renew_days=60,
                               vllm_omni_monitoring_enabled=True, vllm_omni_alert_certificate_days=45))
    assert (plan["router"]["frontdoor"]["tls"]["certificate_days"], plan["router"]["frontdoor"]["tls"]["renew_days"]) \
        == (90, 60)
    assert not any("certificate" in w for w in plan["warnings"])
    # The same windows without monitoring: the alert window is not judged (no alert), the renewal is.
    assert problems_of(one_host(vllm_omni_tls_certificate_days=60, vllm_omni_tls_certificate_renew_days=61))
    build_plan(one_host(vllm_omni_tls_certificate_renew_days=20, vllm_omni_alert_certificate_days=25))


def test_router_retries_and_breaker_can_be_turned_off():
    argv = build_plan(one_host(vllm_omni_router_max_retries=0, vllm_omni_router_cb_failure_threshold=0))[
        "router"]["per_host"]["gpu-a"]["argv"]
    assert "--disable-retries" in argv and "--disable-circuit-breaker" in argv


def test_router_port_colliding_with_a_pipeline_on_its_host_is_refused():
    lines = problems_of(one_host(vllm_omni_router_port=8091))
    assert any("vllm_omni_api_port_base / vllm_omni_router_port collide" in line for line in lines)


def test_router_ports_on_a_router_only_host_must_differ():
    lines = problems_of(two_hosts_and_router(vllm_omni_router_metrics_port=8000))
    assert any("host edge: vllm_omni_router_port / vllm_omni_router_metrics_port collide" in line for line in lines)


def test_mooncake_master_defaults_to_the_first_engine_host_bound_to_its_address():
    plan = build_plan(one_host(vllm_omni_mooncake_master_enabled=True))
    master = plan["mooncake_master"]
    assert master["hosts"] == ["gpu-a"] and master["package"] == "mooncake-transfer-engine-non-cuda==0.3.13.post1"
    argv = master["per_host"]["gpu-a"]["argv"]
    assert "--rpc_address=10.0.0.11" in argv and "--metrics_host=10.0.0.11" in argv
    assert "--enable_http_metadata_server=false" in argv
    assert master["per_host"]["gpu-a"]["health_url"] == "http://10.0.0.11:9003/health"
    purposes = {(r.get("service"), r["purpose"]) for r in plan["hosts"]["gpu-a"]["listen_ports"]}
    assert ("mooncake_master", "rpc") in purposes and ("router", "api") in purposes
    assert any("50051" in w and "ephemeral" in w for w in plan["warnings"])


def test_mooncake_master_port_inside_the_mooncake_range_is_refused():
    lines = problems_of(one_host(vllm_omni_mooncake_master_enabled=True, vllm_omni_mooncake_master_rpc_port=16500))
    assert any("vllm_omni_mooncake_rpc_port_range / vllm_omni_mooncake_master_rpc_port collide" in line
               for line in lines)


def test_master_group_without_enabling_the_master_is_refused():
    inv = one_host()
    inv["master_hosts"] = ["gpu-a"]
    assert any("is false, but group vllm_omni_mooncake_master lists gpu-a" in line for line in problems_of(inv))


def test_the_api_key_never_reaches_the_plan_or_the_render(tmp_path):
    secret = "very-secret-key-0123456789abcdef"  # noqa: S105 - a test value
    inv = load_ansible_inventory(REPO / "tests" / "golden" / "pd-2hosts" / "inventory",
                                 extra_vars={"vllm_omni_api_key": secret})
    assert all(secret not in json.dumps(v) for v in inv["hostvars"].values())
    plan = build_plan(inv)
    assert secret not in json.dumps(plan)
    assert all(secret not in text for text in render_tree(plan).values())


def test_api_key_can_be_made_optional_with_a_warning():
    plan = build_plan(one_host(vllm_omni_api_key_required=False))
    assert plan["router"]["api_key_required"] is False
    assert any("without an API key" in w for w in plan["warnings"])
