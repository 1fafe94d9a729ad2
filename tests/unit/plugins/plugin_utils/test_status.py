"""status.yml's document: each router's front door certificate, when it expires and the days left."""

from __future__ import annotations

import datetime
import subprocess

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _status

NOW = datetime.datetime(2027, 1, 1, tzinfo=datetime.timezone.utc)


def certificate(tmp_path, days: int) -> str:
    path = tmp_path / f"cert-{days}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=10.0.0.5", "-days", str(days), "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(path)], check=True, capture_output=True)
    return path.read_text()


def plan() -> dict:
    return {"hosts": {}, "worker_urls": [], "backend": {"name": "simulator", "stand_in": True},
            "router": {"per_host": {"edge": {"url": "https://10.0.0.5:8000"}}}}


def test_each_router_shows_its_certificate_expiry_and_days_left(tmp_path):
    pem = certificate(tmp_path, 30)
    now = datetime.datetime.now(datetime.timezone.utc)
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], "certificate": pem}},
                                       now=now)
    [router] = document["routers"]
    assert router["certificate_days_left"] in (29, 30)
    assert router["certificate_expires"].endswith("Z") and document["ok"]
    line = _status.status_table(document)[-2]
    assert f"certificate expires {router['certificate_expires'][:10]} ({router['certificate_days_left']} days left)" in line


def test_an_expired_certificate_makes_the_deployment_not_ok(tmp_path):
    pem = certificate(tmp_path, 1)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3)
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], "certificate": pem}},
                                       now=later)
    assert document["routers"][0]["certificate_days_left"] < 0 and not document["ok"]
    assert "certificate EXPIRED" in _status.status_table(document)[-2]


@pytest.mark.parametrize("seen", [{}, {"certificate": ""}, {"certificate": "not a certificate"},
                                  {"certificate": "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"}])
def test_no_readable_certificate_shows_nothing_and_is_not_a_failure(seen):
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], **seen}}, now=NOW)
    assert document["routers"][0]["certificate_expires"] is None and document["ok"]
    assert "certificate" not in _status.status_table(document)[-2]


def answer(*series) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"host": host, "pipeline": name}, "value": [1.7e9, value]} for host, name, value in series]}}


def pipeline_plan(stand_in=False) -> dict:
    pipeline = {"name": "omni0", "unit": "vllm-omni@omni0.service", "url": "http://10.0.0.11:8091",
                "gpus": [0, 1], "ports": {"api": 8091}}
    headless = {"name": "omni-span0-decode0", "pipeline": "omni-span0", "process": "headless",
                "unit": "vllm-omni@omni-span0-decode0.service", "url": None, "health_url": None, "gpus": [2],
                "ports": {}}
    return {"hosts": {"gpu-a": {"pipelines": [pipeline, headless]}}, "worker_urls": [pipeline["url"]],
            "backend": {"name": "simulator" if stand_in else "engine", "stand_in": stand_in},
            "engine": {"vllm_omni_version": "0.26.0", "vllm_version": "0.26.0"},
            "router": {"per_host": {"edge": {"url": "https://10.0.0.5:8000"}}}}


ROUTED = {"edge": {"health": 200, "workers": [{"url": "http://10.0.0.11:8091", "is_healthy": True}]}}


UNITS = {"gpu-a": {"vllm-omni@omni0.service": {"ActiveState": "active", "SubState": "running", "MainPID": "4242",
                                               "ActiveEnterTimestamp": "Thu 2026-12-31 21:30:00 UTC", "NRestarts": "2"}}}


def test_each_pipeline_shows_uptime_restarts_version_and_its_last_minutes():
    metrics = {"ttft_p50_s": answer(("gpu-a", "omni0", "0.21")), "ttft_p99_s": answer(("gpu-a", "omni0", "1.5")),
               "itl_p50_s": answer(("gpu-a", "omni0", "NaN")),
               "generation_tokens_per_s": answer(("gpu-a", "omni0", "340.25"), ("gpu-b", "omni0", "1"))}
    document = _status.status_document(pipeline_plan(), UNITS, {"http://10.0.0.11:8091": 200}, {}, now=NOW,
                                       metrics=metrics)
    head, headless = document["pipelines"]
    assert (head["uptime_s"], head["restarts"]) == (2.5 * 3600, 2)
    assert head["version"] == document["version"] == "vllm-omni 0.26.0 (vllm 0.26.0)"
    assert head["metrics"] == {"ttft_p50_s": 0.21, "ttft_p99_s": 1.5, "itl_p50_s": None,  # NaN: no observations
                               "generation_tokens_per_s": 340.25}
    assert head["metrics_note"] is None and document["metrics_source"] == "prometheus"
    assert headless["metrics"] is None and headless["metrics_note"].startswith("headless")
    assert headless["uptime_s"] is None and headless["restarts"] is None  # never seen: unknown, not 0
    table = _status.status_table(document)
    assert "UP" in table[0] and "TTFT p50/p99 ITL p50 TOK/S (5m)" in table[0]
    assert "2h30m  2   210ms/1.50s - 340.2/s" in table[1], table[1]
    assert table[-2] == "engine (plan): vllm-omni 0.26.0 (vllm 0.26.0)"


@pytest.mark.parametrize(("metrics", "note"), [
    (None, "no prometheus"),  # the plan runs none
    ({}, "prometheus did not answer"),  # not reached (or outside --limit)
    ({"ttft_p50_s": None, "itl_p50_s": {"status": "error", "error": "bad_data"}}, "prometheus did not answer"),
    ({"ttft_p50_s": answer()}, "no data"),  # answered, but nothing of this pipeline (the simulator has no such names)
])
def test_no_metrics_say_why_and_do_not_fail_the_status(metrics, note):
    document = _status.status_document(pipeline_plan(stand_in=True), UNITS, {"http://10.0.0.11:8091": 200}, ROUTED,
                                       now=NOW, metrics=metrics)
    head = document["pipelines"][0]
    assert head["metrics"] is None and head["metrics_note"] == note and head["ok"]  # degrades, never fails
    assert f" {note} " in _status.status_table(document)[1]
    assert document["version"].endswith("SIMULATOR (simulator) stands in")


@pytest.mark.parametrize("stamp", ["", "n/a", "Thu 2026-12-31 22:30:00 CET", "Thu 2026-13-31 21:30:00 UTC", None])
def test_an_unreadable_start_time_is_an_unknown_uptime(stamp):
    units = {"gpu-a": {"vllm-omni@omni0.service": {**UNITS["gpu-a"]["vllm-omni@omni0.service"],
                                                   "ActiveEnterTimestamp": stamp, "NRestarts": ""}}}
    head = _status.status_document(pipeline_plan(), units, {}, {}, now=NOW)["pipelines"][0]
    assert head["uptime_s"] is None and head["restarts"] is None
    assert _status.uptime_text(None) == "-" and _status.uptime_text(90061) == "1d1h" and _status.uptime_text(59) == "59s"


def test_the_engine_plugin_and_its_fixes_are_named_with_the_version():
    plan = pipeline_plan()
    plan["backend"]["engine_plugin"] = {"distribution": "vllm-omni-serve-engine", "files": "engine_plugin",
                                        "revision": 1, "fixes": ["request_sampling_reaches_answer_stage"]}
    document = _status.status_document(plan, UNITS, {"http://10.0.0.11:8091": 200}, {}, now=NOW)
    assert document["version"] == ("vllm-omni 0.26.0 (vllm 0.26.0), the collection's engine plugin revision 1 with "
                                   "request_sampling_reaches_answer_stage")
    assert _status.status_table(document)[-2] == f"engine (plan): {document['version']}"
