# PRIVATE to the collection: may change or disappear in any release.
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Prometheus targets and scrape configuration, from the plan.

Every engine pipeline, router and Mooncake master of the plan becomes a file_sd target whose labels
say what it is (host, pipeline, GPUs, backend), so dashboards group by them. Serialisation only.
"""

from __future__ import annotations

import json

from . import _yaml

JOBS = {
    "engines": "vllm-omni-engine",
    "routers": "vllm-omni-router",
    "mooncake-master": "mooncake-master",
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
    if plan["mooncake_master"]["enabled"]:
        groups["mooncake-master"] = [{"targets": [_hostport(entry["metrics_url"])], "labels": {"host": host}}
                                     for host, entry in plan["mooncake_master"]["per_host"].items()]
    return groups


def scrape_configs(plan: dict, targets_dir: str) -> list[dict]:
    return [{"job_name": JOBS[stem], "metrics_path": "/metrics", "scrape_interval": "15s",
             "file_sd_configs": [{"files": [f"{targets_dir}/{stem}.json"]}]}
            for stem in targets(plan)]


def prometheus_files(plan: dict, targets_dir: str) -> dict[str, str]:
    """{relative path: text}: targets/<stem>.json for file_sd, and scrape-configs.yml to include."""
    # One target group per line: readable diffs, and the C encoder (indent= would fall back to Python).
    files = {f"targets/{stem}.json": "[\n" + ",\n".join(json.dumps(g, sort_keys=True) for g in groups) + "\n]\n"
             for stem, groups in targets(plan).items()}
    files["scrape-configs.yml"] = ("# Rendered by vllm_omni.serve from the plan: the deployment's scrape jobs.\n"
                                   + _yaml.dump({"scrape_configs": scrape_configs(plan, targets_dir)}))
    return files
