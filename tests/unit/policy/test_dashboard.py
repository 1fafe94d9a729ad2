"""The Grafana dashboard: valid structure, and every query asks about jobs the collection renders."""

from __future__ import annotations

import json
import re

from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._observability import JOBS

DASHBOARD = json.loads((REPO / "dashboards" / "grafana" / "vllm-omni-serve.json").read_text())


def panels():
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def test_dashboard_has_the_grafana_essentials():
    assert DASHBOARD["uid"] and DASHBOARD["title"] and isinstance(DASHBOARD["schemaVersion"], int)
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in DASHBOARD["panels"]:
        grid = panel["gridPos"]
        assert {"x", "y", "w", "h"} <= set(grid) and 0 <= grid["x"] < 24 and grid["x"] + grid["w"] <= 24


def test_every_panel_queries_prometheus_through_the_datasource_variable():
    names = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert len(panels()) >= 5, "the dashboard has (almost) no panels"
    for panel in panels():
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and "DS_PROMETHEUS" in names
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"]


def test_queries_name_only_jobs_the_plan_renders():
    jobs = set()
    for panel in panels():
        for target in panel["targets"]:
            jobs |= set(re.findall(r'job="([^"]+)"', target["expr"]))
    assert jobs <= set(JOBS.values()), jobs - set(JOBS.values())
    assert {"vllm-omni-engine", "vllm-omni-router"} <= jobs


def test_per_pipeline_and_per_host_views_exist():
    titles = " | ".join(p["title"] for p in panels())
    for wanted in ("Request rate", "Latency", "Errors", "GPUs in use"):
        assert wanted in titles
    grouped = [t["expr"] for p in panels() for t in p["targets"]]
    assert any("by (host, pipeline)" in expr for expr in grouped)
    assert any("by (host)" in expr for expr in grouped)
