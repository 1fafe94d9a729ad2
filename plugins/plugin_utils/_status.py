# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""status.yml: what runs, against what the plan says should run. Pure: observations in, document out."""

from __future__ import annotations

import datetime


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
                    now: datetime.datetime | None = None) -> dict:
    """One JSON document: per pipeline its unit state, health, GPUs, ports and router membership.

    ``units``: {host: {unit: {ActiveState, SubState, MainPID, ActiveEnterTimestamp}}};
    ``health``: {url: HTTP status or None}; ``router``: {host: {"health": status, "workers": [...],
    "certificate": the front door's certificate (PEM) or ""}}: each router shows when its certificate
    expires and the days left; an expired one makes the deployment not ok.
    """
    health = {url: (code if isinstance(code, int) and code > 0 else None) for url, code in health.items()}
    members: dict[str, list[str]] = {}
    for host, seen in router.items():
        for worker in seen.get("workers") or []:
            members.setdefault(worker["url"], []).append(f"{host}:{'healthy' if worker.get('is_healthy') else 'unhealthy'}")
    pipelines = []
    for host, host_plan in plan["hosts"].items():
        for pipeline in host_plan["pipelines"]:
            unit = units.get(host, {}).get(pipeline["unit"], {})
            url, health_url = pipeline["url"], pipeline.get("health_url", pipeline["url"])
            active = unit.get("ActiveState") == "active"
            # A headless stage serves no API and is no router member: running (and, for a stand-in, healthy).
            healthy = health.get(health_url) == 200 if health_url else True
            routed = (bool(members.get(url)) and all(m.endswith(":healthy") for m in members[url])) if url else True
            pipelines.append({
                "host": host,
                "pipeline": pipeline["name"],
                "of": pipeline.get("pipeline", pipeline["name"]),
                "process": pipeline.get("process", "single"),
                "unit": pipeline["unit"],
                "state": f"{unit.get('ActiveState', 'unknown')}/{unit.get('SubState', 'unknown')}",
                "since": unit.get("ActiveEnterTimestamp") or None,
                "pid": int(unit["MainPID"]) if str(unit.get("MainPID", "0")).isdigit() and int(unit["MainPID"]) else None,
                "health": health.get(health_url) if health_url else None,
                "gpus": pipeline["gpus"],
                "ports": pipeline["ports"],
                "url": url,
                "router": members.get(url, []) if url else [],
                "ok": active and healthy and routed,
            })
    stale = sorted(url for url in members if url not in plan["worker_urls"])
    routers = [{"host": host, "url": plan["router"]["per_host"][host]["url"], "health": seen.get("health"),
                "workers": len(seen.get("workers") or []), **certificate_expiry(seen.get("certificate"), now)}
               for host, seen in router.items()]
    healthy = (all(p["ok"] for p in pipelines) and all(r["health"] == 200 for r in routers) and not stale
               and not any((r["certificate_days_left"] or 0) < 0 for r in routers))
    return {"ok": healthy, "backend": plan["backend"]["name"], "stand_in": plan["backend"]["stand_in"],
            "pipelines": pipelines, "routers": routers, "router_members_not_in_plan": stale}


def status_table(document: dict) -> list[str]:
    header = f"{'HOST':<16} {'PIPELINE':<20} {'STATE':<18} {'HEALTH':<6} {'GPUS':<12} {'API':<6} ROUTER"
    lines = [header]
    for p in document["pipelines"]:
        headless = p.get("process") == "headless"
        router = (f"headless stage of {p['of']}" if headless else ' '.join(p['router']) or 'NOT IN ROUTER')
        api = "-" if headless and p["health"] is None else p["ports"]["api"]
        lines.append(f"{p['host']:<16} {p['pipeline']:<20} {p['state']:<18} {p['health'] or '-'!s:<6} "
                     f"{','.join(map(str, p['gpus'])):<12} {api!s:<6} {router}"
                     + ("" if p["ok"] else "   <- check"))
    for r in document["routers"]:
        days = r.get("certificate_days_left")
        certificate = ("" if r.get("certificate_expires") is None else
                       f", certificate EXPIRED {r['certificate_expires'][:10]}   <- check" if days < 0 else
                       f", certificate expires {r['certificate_expires'][:10]} ({days} days left)")
        lines.append(f"router {r['url']}: health {r['health'] or '-'}, {r['workers']} worker(s){certificate}")
    if document["router_members_not_in_plan"]:
        lines.append(f"router lists workers the plan does not have: {', '.join(document['router_members_not_in_plan'])}")
    lines.append(("OK" if document["ok"] else "NOT OK") + (" (SIMULATOR backend)" if document["stand_in"] else ""))
    return lines
