"""One list of metric names (data/metrics.yml): the dashboard and the alert rules query only names on it,
and the engine's names are on the engine's /metrics fixture. The rendered rules pass `promtool check rules`
where promtool is at hand (on PATH, or the lab's rootfs: Debian's prometheus package)."""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from unitlib import REPO, inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _observability
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _status
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _prometheus

DATA = yaml.safe_load((REPO / "data" / "metrics.yml").read_text())
DASHBOARD = json.loads((REPO / "dashboards" / "grafana" / "vllm-omni-serve.json").read_text())
GOLDEN_PLAN = json.loads((REPO / "tests" / "golden" / "pd-1host-3gpu" / "expected" / "plan.json").read_text())
SUFFIXES = ("_bucket", "_count", "_sum")
PROMQL_WORDS = {"sum", "by", "rate", "increase", "max", "min", "count", "histogram_quantile", "up", "or", "and",
                "le", "without", "on", "avg", "time", "vector", "offset", "bool", "ignoring", "group_left", "unless"}


def known() -> dict[str, dict]:
    return {name: spec for exporter in DATA.values() for name, spec in exporter["metrics"].items()}


def names_in(expr: str) -> set[str]:
    """Metric names of a PromQL expression: identifiers (with colons) followed by { or [ or standing alone."""
    stripped = re.sub(r'\{[^}]*\}', "{}", re.sub(r'"[^"]*"', '""', expr))
    found = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped)) - PROMQL_WORDS
    labels = {label for spec in known().values() for label in spec["labels"]}
    return {name for name in found if not re.fullmatch(r"\d+|[smhd]", name)} - labels


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in known():
            return name.removesuffix(suffix)
    return name


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in DASHBOARD["panels"] if p["type"] != "row" for t in p["targets"]]


def rule_exprs(plan: dict) -> list[str]:
    return [rule["expr"] for group in _prometheus.alert_rules(plan) for rule in group["rules"]]


def test_the_dashboard_and_the_rules_query_only_listed_names():
    listed = set(known())
    sources = [dashboard_exprs(), rule_exprs(GOLDEN_PLAN), list(_status.queries('pd').values()),
               list(_status.queries('aggregated').values())]
    assert all(sources), [len(exprs) for exprs in sources]  # each source has queries to check
    for expr in (expr for exprs in sources for expr in exprs):
        unknown = {base(n) for n in names_in(expr)} - listed
        assert not unknown, f"{expr}: {sorted(unknown)} not in data/metrics.yml"


def test_the_panels_and_rules_the_issue_asks_for_exist():
    titles = " | ".join(p["title"] for p in DASHBOARD["panels"])
    for wanted in ("TTFT", "ITL", "Queue", "KV cache usage", "KV hand-offs"):
        assert wanted in titles
    alerts = {r["alert"] for g in _prometheus.alert_rules(GOLDEN_PLAN) for r in g["rules"]}
    assert {"VllmOmniEngineDown", "VllmOmniPDHandoffFailures", "VllmOmniDecodeWaitingForKV",
            "VllmOmniTTFTOverObjective", "VllmOmniCertificateExpiresSoon", "VllmOmniPipelineUnhealthy"} <= alerts


def planned(**settings) -> dict:
    """A one-host plan from the planner, with these settings in the inventory."""
    return build_plan(inventory({"gpu-1": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}}, settings,
                                router=["edge-1"]))


def test_the_ttft_objective_is_the_plans_setting():
    plan = planned(vllm_omni_alert_ttft_seconds=0.75)
    assert plan["monitoring"]["alerts"]["ttft_seconds"] == 0.75
    (ttft,) = [r for g in _prometheus.alert_rules(plan) for r in g["rules"] if r["alert"] == "VllmOmniTTFTOverObjective"]
    assert ttft["expr"].endswith("> 0.75") and "0.75 s" in ttft["annotations"]["summary"]


def test_the_certificate_window_is_the_plans_setting_and_needs_a_front_door():
    plan = planned(vllm_omni_alert_certificate_days=30)
    assert plan["monitoring"]["alerts"]["certificate_days"] == 30
    (rule,) = [r for g in _prometheus.alert_rules(plan) for r in g["rules"] if r["alert"] == "VllmOmniCertificateExpiresSoon"]
    assert rule["expr"].endswith("/ 86400 < 30") and "30 days" in rule["annotations"]["summary"]
    assert 'job="vllm-omni-frontdoor"' in rule["expr"]
    jobs = {j["job_name"]: j for j in _prometheus.scrape_configs(GOLDEN_PLAN, "/t")}
    # Read even when the certificate has expired (a verified scrape would fail then, and the alert resolve).
    assert jobs["vllm-omni-frontdoor"]["scheme"] == "https"
    assert jobs["vllm-omni-frontdoor"]["tls_config"] == {"insecure_skip_verify": True}
    door = _observability.targets(GOLDEN_PLAN)["frontdoor"]
    assert door == [{"targets": [_observability._hostport(e["url"])], "labels": {"host": h}}
                    for h, e in GOLDEN_PLAN["router"]["per_host"].items()]
    without = {**GOLDEN_PLAN, "router": {**GOLDEN_PLAN["router"],
                                         "frontdoor": {**GOLDEN_PLAN["router"]["frontdoor"], "enabled": False}}}
    assert "VllmOmniCertificateExpiresSoon" not in {r["alert"] for g in _prometheus.alert_rules(without) for r in g["rules"]}
    assert "frontdoor" not in _observability.targets(without)


def self_signed(days: int) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "10.0.0.5")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_the_front_doors_metrics_text_is_the_certificates_not_after_under_the_listed_name():
    text = _prometheus.certificate_metrics(self_signed(90) + "-----BEGIN CERTIFICATE-----\nnot read\n")
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    expires = datetime.datetime(2026, 4, 1, tzinfo=datetime.timezone.utc).timestamp()
    assert samples == [f"vllm_omni_frontdoor_certificate_expiry_timestamp_seconds {int(expires)}"]
    assert {line.split()[0] for line in samples} == set(DATA["frontdoor"]["metrics"])
    assert "# TYPE vllm_omni_frontdoor_certificate_expiry_timestamp_seconds gauge" in text
    with pytest.raises(ValueError):
        _prometheus.certificate_metrics("")


def test_aggregated_layouts_have_no_pd_rules():
    alerts = {r["alert"] for g in _prometheus.alert_rules({**GOLDEN_PLAN, "layout": "aggregated"}) for r in g["rules"]}
    assert "VllmOmniPDHandoffFailures" not in alerts and "VllmOmniEngineDown" in alerts


def fixture_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


def test_every_listed_engine_name_is_on_the_engines_metrics_fixture():
    engine = DATA["engine"]
    path = REPO / engine["fixture"]
    text = path.read_text()
    exposed = fixture_names(path)
    for name, spec in engine["metrics"].items():
        wanted = {f"{name}{s}" for s in SUFFIXES} if spec["type"] == "histogram" else {name}
        assert wanted & exposed, f"{name} ({spec['type']}) is not on {engine['fixture']}"
        for label in spec["labels"]:
            assert re.search(rf"^{re.escape(name)}\w*{{[^}}]*\b{label}=", text, re.M), f"{name} has no label {label}"
    # The real engine's /metrics (device run 7), not names written down from its source.
    assert text.startswith("# CAPTURED: GET /metrics of the real vLLM 0.26.0") and "DERIVED FROM SOURCE" not in text


def test_an_aggregated_engine_exposes_every_listed_name_but_the_hand_offs():
    # Device run 9: the same engine serving the aggregated render. Its panels and the engine-down, TTFT and
    # queue rules have their names; only the PD hand-off histograms (whose rules aggregated plans leave out,
    # test above) are absent, so their panels read "no data" there rather than a wrong zero.
    path = REPO / "tests" / "fixtures" / "metrics" / "vllm-omni-0.26.0-aggregated.prom"
    exposed = fixture_names(path)
    missing = {name for name, spec in DATA["engine"]["metrics"].items()
               if not ({f"{name}{s}" for s in SUFFIXES} if spec["type"] == "histogram" else {name}) & exposed}
    assert missing == {"vllm_omni:transfer_size_bytes", "vllm_omni:transfer_tx_s"}
    assert path.read_text().startswith("# CAPTURED: GET /metrics of the real vLLM 0.26.0")


def promtool() -> str | None:
    cache = os.environ.get("VLLM_OMNI_CACHE") or str(Path.home() / ".cache" / "vllm-omni-serve")
    found = (shutil.which("promtool") or next(iter(sorted(glob.glob(f"{cache}/tools-*/bin/promtool"))), None)
             or next(iter(sorted(glob.glob(f"{cache}/lab/rootfs-*/usr/bin/promtool"))), None))
    if found and subprocess.run([found, "--version"], capture_output=True, check=False).returncode == 0:
        return found
    return None


@pytest.mark.parametrize("layout", ["pd", "aggregated"])
def test_rendered_rules_pass_promtool(tmp_path, layout):
    tool = promtool()
    if tool is None:
        pytest.skip("promtool is neither on PATH nor in the lab's rootfs (make lab builds it)")
    rules = tmp_path / "vllm-omni.rules.yml"
    rules.write_text(_prometheus.rules_text({**GOLDEN_PLAN, "layout": layout}))
    result = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_rendered_prometheus_config_with_the_front_door_job_passes_promtool(tmp_path):
    tool = promtool()
    if tool is None:
        pytest.skip("promtool is neither on PATH nor in the lab's rootfs (make lab builds it)")
    from unitlib import one_host

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _host_files

    plan = build_plan(one_host(vllm_omni_monitoring_enabled=True))
    (host,) = plan["monitoring"]["per_host"]
    for stem, groups in _observability.targets(plan).items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(groups))
    (tmp_path / "rules.yml").write_text(_prometheus.rules_text(plan))
    document = yaml.safe_load(_host_files.prometheus_config(plan, host, _prometheus.scrape_configs(plan, str(tmp_path))))
    assert "vllm-omni-frontdoor" in {job["job_name"] for job in document["scrape_configs"]}
    # Every job's file_sd file is one the monitoring role installs (the plan's footprint).
    installed = {f["path"] for f in plan["footprint"][host]["files"] if f["component"] == "monitoring"}
    assert {f"{plan['monitoring']['targets_dir']}/{stem}.json" for stem in _observability.targets(plan)} <= installed
    document["rule_files"] = [str(tmp_path / "rules.yml")]  # the host's path, here
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(document))
    result = subprocess.run([tool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_status_queries_pass_promtool(tmp_path):
    tool = promtool()
    if tool is None:
        pytest.skip("promtool is neither on PATH nor in the lab's rootfs (make lab builds it)")
    # As recording rules: promtool parses each expression.
    rules = {"groups": [{"name": "status", "rules": [{"record": f"vllm_omni_status:{layout}_{key}", "expr": expr}
                                                     for layout in ("pd", "aggregated")
                                                     for key, expr in _status.queries(layout).items()]}]}
    (tmp_path / "status.rules.yml").write_text(yaml.safe_dump(rules))
    result = subprocess.run([tool, "check", "rules", str(tmp_path / "status.rules.yml")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _ttft_series(stage: str, buckets: dict[str, int]) -> list[dict]:
    """Cumulative TTFT bucket counters of one stage of omni0 on gpu-1, growing by ``buckets[le]`` a minute."""
    labels = 'job="vllm-omni-engine", host="gpu-1", pipeline="omni0"'
    return [{"series": f'vllm:time_to_first_token_seconds_bucket{{{labels}, stage="{stage}", le="{le}"}}',
             "values": f"0+{per_minute}x30"} for le, per_minute in buckets.items()]


def test_the_pd_client_ttft_is_prefills_plus_decodes_and_the_alert_fires_on_it(tmp_path):
    """promtool evaluates the status query and the alert on two stages' histograms: every prefill between 0.1 and
    0.25 s, every decode between 1 and 2.5 s, the talker (stage 2) slow but off the text path."""
    tool = promtool()
    if tool is None:
        pytest.skip("promtool is neither on PATH nor in the tool venv nor in the lab's rootfs")
    plan = {**GOLDEN_PLAN, "layout": "pd"}
    rules = tmp_path / "rules.yml"
    rules.write_text(_prometheus.rules_text(plan))
    series = (_ttft_series("0", {"0.1": 0, "0.25": 60, "+Inf": 60}) + _ttft_series("1", {"1": 0, "2.5": 60, "+Inf": 60})
              + _ttft_series("2", {"10": 0, "20": 60, "+Inf": 60}))
    # Linear interpolation inside the one bucket each stage fills: p50 0.175 + 1.75, p99 0.2485 + 2.485.
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": _status.queries("pd")["ttft_p50_s"], "eval_time": "20m",
             "exp_samples": [{"labels": '{host="gpu-1", pipeline="omni0"}', "value": 1.925}]},
            {"expr": _status.queries("pd")["ttft_p99_s"], "eval_time": "20m",
             "exp_samples": [{"labels": '{host="gpu-1", pipeline="omni0"}', "value": 2.7335}]},
            {"expr": _status.queries("aggregated")["ttft_p50_s"], "eval_time": "20m",
             "exp_samples": [{"labels": '{host="gpu-1", pipeline="omni0"}', "value": 0.175}]}],
        "alert_rule_test": [{"eval_time": "25m", "alertname": "VllmOmniTTFTOverObjective", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "host": "gpu-1", "pipeline": "omni0"},
            "exp_annotations": {
                "summary": "TTFT p99 of omni0 on gpu-1 is over the objective (2 s, vllm_omni_alert_ttft_seconds)",
                "description": "p99 over 10 minutes, prefill's plus decode's: 2.733s."}}]}],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([tool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_pipeline_the_router_finds_unhealthy_fires_after_five_minutes_and_a_cold_start_does_not(tmp_path):
    """The GPU run 9 failure: the head of a distributed pipeline lives on (up == 1) after its headless stage
    died, answering 503 at /health; the router's health gauge goes 0 and stays there. A pipeline that is
    unhealthy for 3 minutes (a cold start) and then healthy fires nothing."""
    tool = promtool()
    if tool is None:
        pytest.skip("promtool is neither on PATH nor in the tool venv nor in the lab's rootfs")
    rules = tmp_path / "rules.yml"
    rules.write_text(_prometheus.rules_text({**GOLDEN_PLAN, "layout": "pd"}))
    router = 'job="vllm-omni-router", host="edge-1", instance="10.0.0.5:29000"'
    dead, cold = "http://10.0.0.11:8091", "http://10.0.0.12:8091"
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": f'vllm_router_worker_health{{{router}, worker="{dead}"}}', "values": "1 1 0x20"},
            {"series": f'vllm_router_worker_health{{{router}, worker="{cold}"}}', "values": "1 1 0 0 0 1x20"},
            {"series": f'up{{{router}}}', "values": "1x22"}],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "VllmOmniPipelineUnhealthy", "exp_alerts": []},
            {"eval_time": "8m", "alertname": "VllmOmniPipelineUnhealthy", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "host": "edge-1", "worker": dead},
                "exp_annotations": {
                    "summary": f"The router on edge-1 has found {dead} unhealthy for 5 minutes (no traffic goes there)",
                    "description": "A cold start takes minutes; longer, read the pipeline's journal. A distributed "
                                   "pipeline whose headless stage died does not recover alone: restart it in stage "
                                   "order (docs/operations.md)."}}]},
            {"eval_time": "8m", "alertname": "VllmOmniRouterDown", "exp_alerts": []}],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([tool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
