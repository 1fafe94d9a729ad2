# PRIVATE to the collection: may change or disappear in any release.
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Prometheus targets, scrape configuration and alert rules, from the plan.

Every engine pipeline, router and Mooncake master of the plan becomes a file_sd target whose labels
say what it is (host, pipeline, GPUs, backend), so dashboards group by them. The alert rules query
only the metric names of data/metrics.yml (tests/unit/policy/test_metrics.py holds them to it). Serialisation only.
"""

from __future__ import annotations

JOBS = {
    "engines": "vllm-omni-engine",
    "routers": "vllm-omni-router",
    "frontdoor": "vllm-omni-frontdoor",
    "mooncake-master": "mooncake-master",
    "self-heal": "vllm-omni-self-heal",
    "gpus": "vllm-omni-gpu",
}


def _hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def targets(plan: dict) -> dict[str, list[dict]]:
    """{file stem: file_sd target groups}."""
    backend = plan["backend"]["name"]
    engines = []
    for host, host_plan in plan["hosts"].items():
        for pipeline in host_plan["pipelines"]:
            if not pipeline["url"]:  # a headless engine serves no HTTP (its head reports the pipeline's metrics)
                continue
            engines.append({"targets": [_hostport(pipeline["url"])],
                            "labels": {"host": host, "pipeline": pipeline["name"], "backend": backend,
                                       "gpus": ",".join(map(str, pipeline["gpus"])),
                                       "gpu_count": str(len(pipeline["gpus"])), "layout": plan["layout"]}})
    routers = [{"targets": [_hostport(entry["metrics_url"])], "labels": {"host": host}}
               for host, entry in plan["router"]["per_host"].items()]
    groups = {"engines": engines, "routers": routers}
    if plan["router"]["frontdoor"]["enabled"]:
        # The door's own /metrics (its certificate's expiry) on the router's port, over TLS.
        groups["frontdoor"] = [{"targets": [_hostport(entry["url"])], "labels": {"host": host}}
                               for host, entry in plan["router"]["per_host"].items()]
    # The self-heal agent of every engine host that runs pipelines.
    groups["self-heal"] = [{"targets": [_hostport(entry["metrics_url"])], "labels": {"host": host}}
                           for host, entry in plan.get("self_heal", {}).get("per_host", {}).items()]
    # The GPU health exporter of every engine host that runs it (none with vllm_omni_gpu_metrics false).
    groups["gpus"] = [{"targets": [_hostport(entry["metrics_url"])], "labels": {"host": host}}
                      for host, entry in plan.get("gpu_metrics", {}).get("per_host", {}).items()]
    if plan["mooncake_master"]["enabled"]:
        groups["mooncake-master"] = [{"targets": [_hostport(entry["metrics_url"])], "labels": {"host": host}}
                                     for host, entry in plan["mooncake_master"]["per_host"].items()]
    return groups
