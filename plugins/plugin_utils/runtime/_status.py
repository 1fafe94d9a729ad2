# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""status.yml: what runs, against what the plan says should run. Pure: observations in, document out."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from ..texts._prometheus import client_ttft, text_stage

# The engines' last minutes, per pipeline, from the deployment's Prometheus (the names of data/metrics.yml, held
# to it by tests/unit/policy/test_metrics.py), along the path a client's text takes: TTFT as VllmOmniTTFTOverObjective
# counts it (_prometheus.client_ttft), ITL and tokens of the stage that writes the text.
WINDOW = "5m"
_ENGINE = 'job="vllm-omni-engine"'


def queries(layout: str) -> dict[str, str]:
    """Result key -> PromQL for a deployment of ``layout``."""
    text = f'{_ENGINE}, stage="{text_stage(layout)}"'
    return {
        "ttft_p50_s": client_ttft(layout, 0.5, WINDOW),
        "ttft_p99_s": client_ttft(layout, 0.99, WINDOW),
        "itl_p50_s": ("histogram_quantile(0.5, sum by (host, pipeline, le) "
                      f"(rate(vllm:inter_token_latency_seconds_bucket{{{text}}}[{WINDOW}])))"),
        "generation_tokens_per_s": f"sum by (host, pipeline) (rate(vllm:generation_tokens_total{{{text}}}[{WINDOW}]))",
    }


QUERIES = queries("pd")  # the keys (and a pd deployment's queries)


def engine_metrics(answers: dict | None) -> tuple[dict, str | None]:
    """Prometheus' answers to QUERIES ({key: the /api/v1/query JSON, or None when the query failed}; None: no
    Prometheus in the plan) -> ({(host, pipeline): {key: number or None}}, why there are none or None).

    A series with no observations in the window (NaN, +Inf) is None; a pipeline no query names has no entry."""
    if answers is None:
        return {}, "no prometheus"
    values: dict[tuple[str, str], dict] = {}
    answered = False
    for key in QUERIES:
        answer = answers.get(key)
        if not isinstance(answer, dict) or answer.get("status") != "success":
            continue
        answered = True
        for series in (answer.get("data") or {}).get("result") or []:
            labels = series.get("metric") or {}
            try:
                number = float(series["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if "host" in labels and "pipeline" in labels:
                values.setdefault((labels["host"], labels["pipeline"]), {})[key] = \
                    number if math.isfinite(number) else None
    return values, (None if answered else "prometheus did not answer")


def _since(timestamp: str | None) -> datetime.datetime | None:
    """systemd's ActiveEnterTimestamp as status.yml reads it (TZ=UTC: ``Wed 2026-12-02 15:20:31 UTC``)."""
    parts = (timestamp or "").split()
    if len(parts) != 4 or parts[3] != "UTC":
        return None
    try:
        return datetime.datetime.strptime(f"{parts[1]} {parts[2]}", "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def certificate_expiry(pem: str | None, now: datetime.datetime | None = None) -> dict:
    """The first certificate in ``pem``: when it expires (UTC, ISO 8601) and the whole days left (negative:
    expired). Nothing readable (no front door, no file, not PEM): both None."""
    unknown = {"certificate_expires": None, "certificate_days_left": None}
    if not pem or "-----BEGIN CERTIFICATE-----" not in pem:
        return unknown
    try:
        from cryptography import x509  # ansible-core's own dependency, on the controller

        certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
    except (ImportError, ValueError, UnicodeEncodeError):
        return unknown
    expires = getattr(certificate, "not_valid_after_utc", None) or \
        certificate.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return {"certificate_expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "certificate_days_left": (expires - now).days}


def status_document(plan: dict, units: dict, health: dict, router: dict,
                    now: datetime.datetime | None = None, metrics: dict | None = None,
                    self_heal: dict | None = None) -> dict:
    """One JSON document: per pipeline its unit state, health, GPUs, ports and router membership.

    ``units``: {host: {unit: {ActiveState, SubState, MainPID, ActiveEnterTimestamp}}};
    ``health``: {url: HTTP status or None}; ``router``: {host: {"health": status, "workers": [...],
    "certificate": the front door's certificate (PEM) or ""}}: each router shows when its certificate
    expires and the days left; an expired one makes the deployment not ok.
    ``metrics``: Prometheus' answers to QUERIES (engine_metrics), or None where the plan runs no Prometheus:
    each pipeline shows its last minutes' TTFT, ITL and tokens per second, or why not (``metrics_note``).
    Each pipeline also shows its uptime and restart count (systemd's ActiveEnterTimestamp, NRestarts) and the
    engine version the plan runs. ``self_heal``: {host: the self-heal agent's state file, or None where it could not
    be read}: each process shows what the agent sees (``self_heal.state``) and its restarts (count, the last's time
    and reason); one it gave up on makes the deployment not ok.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    observed, why = engine_metrics(metrics)
    version = _engine_version(plan)
    health = {url: (code if isinstance(code, int) and code > 0 else None) for url, code in health.items()}
    members = _router_members(router)
    seen_by = _Observed(units, health, members, observed, why, version, now)
    pipelines = [{**_pipeline_row(host, pipeline, seen_by), "self_heal": _self_heal_seen(self_heal, host, pipeline)}
                 for host, host_plan in plan["hosts"].items() for pipeline in host_plan["pipelines"]]
    stale = sorted(url for url in members if url not in plan["worker_urls"])
    routers = [{"host": host, "url": plan["router"]["per_host"][host]["url"], "health": seen.get("health"),
                "workers": len(seen.get("workers") or []), **certificate_expiry(seen.get("certificate"), now)}
               for host, seen in router.items()]
    healthy = (all(p["ok"] for p in pipelines) and all(r["health"] == 200 for r in routers) and not stale
               and not any((r["certificate_days_left"] or 0) < 0 for r in routers)
               and not any((p["self_heal"] or {}).get("gave_up") for p in pipelines))
    return {"ok": healthy, "backend": plan["backend"]["name"], "stand_in": plan["backend"]["stand_in"],
            "version": version, "metrics_window": WINDOW, "metrics_source": why or "prometheus",
            "pipelines": pipelines, "routers": routers, "router_members_not_in_plan": stale}


def _self_heal_seen(self_heal: dict | None, host: str, pipeline: dict) -> dict | None:
    """The agent's view of one process: its state, restarts (all time), the last restart's time and reason, and
    whether it gave up; None when the agent's state could not be read (status says so)."""
    document = (self_heal or {}).get(host)
    watch = next((w for w in (document or {}).get("watch", []) if w.get("unit") == pipeline["unit"]), None)
    if watch is None:
        return None
    last = watch.get("last") or {}
    at = (datetime.datetime.fromtimestamp(last["at"], datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
          if isinstance(last.get("at"), (int, float)) else None)
    return {"enabled": bool(document.get("enabled")), "paused": bool(document.get("paused")),
            "state": watch.get("state"), "restarts": int(watch.get("restarts_total") or 0),
            "last_restart": at, "last_reason": last.get("reason"), "gave_up": bool(watch.get("gave_up"))}


def _engine_version(plan: dict) -> str | None:
    engine = plan.get("engine") or {}
    version = (f"vllm-omni {engine['vllm_omni_version']} (vllm {engine.get('vllm_version', '?')})"
               if engine.get("vllm_omni_version") else None)
    if version and plan["backend"].get("stand_in"):
        version += f", SIMULATOR ({plan['backend']['name']}) stands in"
    plugin = plan["backend"].get("engine_plugin")
    if version and plugin:  # deploy verified it on every engine host (engine role, config_check)
        version += (f", the collection's engine plugin revision {plugin['revision']}"
                    + (f" with {', '.join(plugin['fixes'])}" if plugin.get("fixes") else ""))
    return version


def _router_members(router: dict) -> dict[str, list[str]]:
    """{worker url: ["<router host>:healthy" or ":unhealthy", ...]}: which routers have each worker."""
    members: dict[str, list[str]] = {}
    for host, seen in router.items():
        for worker in seen.get("workers") or []:
            members.setdefault(worker["url"], []).append(f"{host}:{'healthy' if worker.get('is_healthy') else 'unhealthy'}")
    return members


@dataclass(frozen=True)
class _Observed:
    """What status saw, as every pipeline's row reads it."""

    units: dict
    health: dict
    members: dict
    observed: dict
    why: str | None
    version: str | None
    now: datetime.datetime


def _pipeline_row(host: str, pipeline: dict, seen_by: _Observed) -> dict:
    units, health, members, observed, why, version, now = (
        seen_by.units, seen_by.health, seen_by.members, seen_by.observed, seen_by.why, seen_by.version, seen_by.now)
    unit = units.get(host, {}).get(pipeline["unit"], {})
    url, health_url = pipeline["url"], pipeline.get("health_url")
    active = unit.get("ActiveState") == "active"
    since = _since(unit.get("ActiveEnterTimestamp")) if active else None
    restarts = str(unit.get("NRestarts", ""))
    seen = observed.get((host, pipeline["name"]))
    note = (why or ("no data" if seen is None else None)) if pipeline["url"] else "headless (its head reports)"
    # A headless stage serves no API and is no router member: running (and, for a stand-in, healthy).
    healthy = health.get(health_url) == 200 if health_url else True
    routed = (bool(members.get(url)) and all(m.endswith(":healthy") for m in members[url])) if url else True
    return {
        "host": host,
        "pipeline": pipeline["name"],
        "of": pipeline.get("pipeline", pipeline["name"]),
        "process": pipeline.get("process", "single"),
        "unit": pipeline["unit"],
        "state": f"{unit.get('ActiveState', 'unknown')}/{unit.get('SubState', 'unknown')}",
        "since": unit.get("ActiveEnterTimestamp") or None,
        "pid": int(unit["MainPID"]) if str(unit.get("MainPID", "0")).isdigit() and int(unit.get("MainPID", 0)) else None,
        "health": health.get(health_url) if health_url else None,
        "gpus": pipeline["gpus"],
        "ports": pipeline["ports"],
        "url": url,
        "router": members.get(url, []) if url else [],
        "uptime_s": int((now - since).total_seconds()) if since else None,
        "restarts": int(restarts) if restarts.isdigit() else None,
        "version": version,
        "metrics": ({key: (seen or {}).get(key) for key in QUERIES} if seen is not None and pipeline["url"]
                    else None),
        "metrics_note": note,
        "ok": active and healthy and routed,
    }


def uptime_text(seconds: int | None) -> str:
    if seconds is None or seconds < 0:
        return "-"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return (f"{days}d{hours}h" if days else f"{hours}h{minutes:02d}m" if hours else
            f"{minutes}m" if minutes else f"{seconds}s")


def metrics_text(pipeline: dict) -> str:
    """TTFT p50/p99, ITL p50 and generated tokens per second of the window, or why there are none."""
    metrics = pipeline.get("metrics")
    if not metrics:
        return pipeline.get("metrics_note") or "no data"

    def seconds(value):
        return "-" if value is None else f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"
    tokens = metrics.get("generation_tokens_per_s")
    return (f"{seconds(metrics.get('ttft_p50_s'))}/{seconds(metrics.get('ttft_p99_s'))} "
            f"{seconds(metrics.get('itl_p50_s'))} {'-' if tokens is None else f'{tokens:.1f}/s'}")


def status_table(document: dict) -> list[str]:
    window = document.get("metrics_window", "5m")
    header = (f"{'HOST':<16} {'PIPELINE':<20} {'STATE':<18} {'HEALTH':<6} {'GPUS':<12} {'API':<6} {'UP':<6} "
              f"{'RST':<3} {'TTFT p50/p99 ITL p50 TOK/S (' + window + ')':<30} ROUTER")
    lines = [header]
    for p in document["pipelines"]:
        headless = p.get("process") == "headless"
        router = (f"headless stage of {p['of']}" if headless else ' '.join(p['router']) or 'NOT IN ROUTER')
        api = "-" if headless and p["health"] is None else p["ports"]["api"]
        restarts = "-" if p.get("restarts") is None else p["restarts"]
        lines.append(f"{p['host']:<16} {p['pipeline']:<20} {p['state']:<18} {p['health'] or '-'!s:<6} "
                     f"{','.join(map(str, p['gpus'])):<12} {api!s:<6} {uptime_text(p.get('uptime_s')):<6} "
                     f"{restarts!s:<3} {metrics_text(p):<30} {router}"
                     + ("" if p["ok"] else "   <- check"))
    for p in document["pipelines"]:
        heal = p.get("self_heal")
        if heal and (heal["restarts"] or heal["gave_up"]):
            lines.append(f"self-heal {p['host']} {p['unit']}: {heal['restarts']} restart(s), the last "
                         f"{heal['last_restart'] or '-'}: {heal['last_reason'] or '-'}; now {heal['state']}"
                         + ("   <- GAVE UP, check" if heal["gave_up"] else ""))
    for r in document["routers"]:
        days = r.get("certificate_days_left")
        certificate = ("" if r.get("certificate_expires") is None else
                       f", certificate EXPIRED {r['certificate_expires'][:10]}   <- check" if days < 0 else
                       f", certificate expires {r['certificate_expires'][:10]} ({days} days left)")
        lines.append(f"router {r['url']}: health {r['health'] or '-'}, {r['workers']} worker(s){certificate}")
    if document["router_members_not_in_plan"]:
        lines.append(f"router lists workers the plan does not have: {', '.join(document['router_members_not_in_plan'])}")
    if document.get("version"):
        lines.append(f"engine (plan): {document['version']}")
    lines.append(("OK" if document["ok"] else "NOT OK") + (" (SIMULATOR backend)" if document["stand_in"] else ""))
    return lines
