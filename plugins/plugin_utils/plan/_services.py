# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The services around the pipelines: the router in front, the optional Mooncake master.

Same rule as for pipelines: every port, path, version and argv is decided here, once; the roles
only install and start what the plan says.
"""

from __future__ import annotations

from ..host import _engine_data, _locks, _names
from ._setting_groups import FrontDoorSettings, MasterSettings, MonitoringSettings, RouterSettings


def _router_argv(router: RouterSettings, venv: str, ip: str, worker_urls: list[str]) -> list[str]:
    """vllm-router's command line: on loopback behind the front door, on the host's address without one."""
    listen = ("127.0.0.1", router.backend_port) if router.frontdoor_enabled else (ip, router.port)
    argv = [
        f"{venv}/bin/vllm-router", "--host", listen[0], "--port", str(listen[1]),
        "--worker-urls", *worker_urls,
        "--policy", router.policy,
        "--prometheus-host", ip, "--prometheus-port", str(router.metrics_port),
        "--health-check-endpoint", _names.HEALTH_PATH,
        "--health-check-interval-secs", str(router.health_check_interval),
        "--request-timeout-secs", str(router.request_timeout),
        # The router starts after the pipelines are healthy; if one is down it still starts after
        # this wait and its health checker keeps the dead pipeline out until it answers.
        "--worker-startup-timeout-secs", "120",
        "--worker-startup-check-interval", "2",
        "--log-level", router.log_level,
    ]
    retries = router.max_retries
    argv += ["--retry-max-retries", str(retries)] if retries else ["--disable-retries"]
    failures = router.cb_failure_threshold
    argv += (["--cb-failure-threshold", str(failures), "--cb-timeout-duration-secs", str(router.cb_timeout)]
             if failures else ["--disable-circuit-breaker"])
    return argv


def frontdoor_plan(settings: dict) -> dict:
    """The TLS front door (nginx) of the router hosts: where its files go and where the certificate comes from.

    ``ca``: the CA file on the router hosts that the collection's checks verify the door against (the
    collection's own CA, or the operator's vllm_omni_tls_ca_file); None: the system's trust store.
    """
    door = FrontDoorSettings.of(settings)
    enabled, provided, ca_file = door.enabled, door.tls_cert_file is not None, door.tls_ca_file
    return {
        "enabled": enabled,
        "service": _names.FRONTDOOR_UNIT,
        "config": _names.FRONTDOOR_CONFIG,
        # Debian's package enables a welcome page on port 80; the role takes that link away (see its README).
        "distribution_site": _names.NGINX_DEFAULT_SITE,
        "directory": _names.FRONTDOOR_DIR,
        "api_keys": _names.FRONTDOOR_API_KEYS if door.api_key_required else None,
        "certificate": _names.FRONTDOOR_CERT,
        "certificate_key": _names.FRONTDOOR_CERT_KEY,
        "ca": _names.FRONTDOOR_CA if enabled and (not provided or ca_file is not None) else None,
        # The certificate's notAfter (Unix time), written by the frontdoor role from the certificate it installed and
        # served at the door's /metrics (no key: public, as the certificate itself is) for Prometheus' expiry alert.
        "metrics": _names.FRONTDOOR_METRICS,
        "access_log": _names.FRONTDOOR_ACCESS_LOG,
        # provided: the operator's files on the controller; generated: the collection's CA (frontdoor role).
        # certificate_days, renew_days: the certificates the collection makes (None for the operator's own).
        "tls": {"source": "provided" if provided else "generated", "cert_file": door.tls_cert_file,
                "key_file": door.tls_key_file, "ca_file": ca_file,
                "certificate_days": None if provided else door.tls_certificate_days,
                "renew_days": None if provided else door.tls_certificate_renew_days} if enabled else None,
    }


def router_plan(settings: dict, hosts: list[str], defaulted: bool, ips: dict, worker_urls: list[str]) -> dict:
    router = RouterSettings.of(settings)
    version = _engine_data.companions()["vllm_router"]
    venv = _names.venv_dir(router.install_root, f"vllm-router-{version}")
    port, metrics, backend = router.port, router.metrics_port, router.backend_port
    frontdoor = frontdoor_plan(settings)
    scheme = "https" if frontdoor["enabled"] else "http"
    per_host = {}
    for host in sorted(hosts):
        ip = ips[host]
        behind_door, public = _names.http_url("127.0.0.1", backend), _names.http_url(ip, port)
        admin = behind_door if frontdoor["enabled"] else public
        per_host[host] = {
            "ip": ip,
            "url": _names.http_url(ip, port, scheme=scheme),  # what clients use (the front door when there is one)
            "readiness_url": _names.http_url(ip, port, _names.READINESS_PATH, scheme),  # through that same door
            # vllm-router itself: its admin API (membership, drain) is reached from the router host only.
            "admin_url": admin,
            "admin_readiness_url": admin + _names.READINESS_PATH,
            # Where a roll asks the running router, in this order: a deploy that turns the door on or off drains
            # and re-admits pipelines before the router play moves the router, so it may still listen where the
            # door's other state puts it. Loopback first: while a door runs, the public port is the door's own.
            "roll_admin_urls": [behind_door, public],
            "metrics_url": _names.http_url(ip, metrics, _names.METRICS_PATH),
            "argv": _router_argv(router, venv, ip, worker_urls),
        }
    listen = [{"service": "router", "purpose": "api", "first": port, "last": port},
              {"service": "router", "purpose": "metrics", "first": metrics, "last": metrics}]
    if frontdoor["enabled"]:
        listen.append({"service": "router", "purpose": "backend", "first": backend, "last": backend, "loopback": True})
    return {
        "hosts": sorted(hosts),
        "defaulted": defaulted,
        "unit": _names.ROUTER_UNIT,
        "shape_file": _names.ROUTER_SHAPE,  # its argv without the workers: a change restarts the router
        "package": f"vllm-router=={version}",
        "lock": _locks.router_lock(),  # per platform: the plan's locks[platform][name]
        "venv": venv,
        "port": port,
        "metrics_port": metrics,
        "policy": router.policy,
        "api_key_required": router.api_key_required,
        "request_timeout": router.request_timeout,
        "frontdoor": frontdoor,
        "worker_urls": list(worker_urls),
        "per_host": per_host,
        "listen_ports": {host: [dict(r) for r in listen] for host in sorted(hosts)},
    }


MASTER_UNIT = _names.MASTER_UNIT


def master_plan(settings: dict, hosts: list[str], defaulted: bool, ips: dict) -> dict:
    master = MasterSettings.of(settings)
    if not master.enabled:
        return {"enabled": False, "hosts": [], "unit": MASTER_UNIT}  # unit: uninstall removes an earlier one
    variant = _engine_data.companions()["mooncake"]["none"]  # the master needs no GPU
    venv = _names.venv_dir(master.install_root, f"mooncake-master-{variant['version']}")
    rpc, http = master.rpc_port, master.metrics_port
    per_host = {}
    for host in sorted(hosts):
        ip = ips[host]
        per_host[host] = {
            "ip": ip,
            "rpc_address": f"{ip}:{rpc}",
            "health_url": _names.http_url(ip, http, _names.HEALTH_PATH),
            "metrics_url": _names.http_url(ip, http, _names.METRICS_PATH),
            # Bound to the host's address, not 0.0.0.0. The embedded HTTP metadata server stays off:
            # it ignores its host flag and binds every interface (docs/mooncake.md).
            "argv": [f"{venv}/bin/mooncake_master", f"--rpc_address={ip}", f"--rpc_port={rpc}",
                     f"--metrics_host={ip}", f"--metrics_port={http}", "--enable_http_metadata_server=false",
                     "--logtostderr=true"],
        }
    return {
        "enabled": True,
        "hosts": sorted(hosts),
        "defaulted": defaulted,
        "unit": MASTER_UNIT,
        "package": f"{variant['package']}=={variant['version']}",
        "lock": _locks.master_lock(),
        "venv": venv,
        "rpc_port": rpc,
        "metrics_port": http,
        "per_host": per_host,
        "listen_ports": {host: [{"service": "mooncake_master", "purpose": "rpc", "first": rpc, "last": rpc},
                                {"service": "mooncake_master", "purpose": "http", "first": http, "last": http}]
                         for host in sorted(hosts)},
    }


def monitoring_plan(settings: dict, hosts: list[str], defaulted: bool, ips: dict) -> dict:
    monitoring = MonitoringSettings.of(settings)
    # The alert rules' thresholds (texts/_prometheus), in the plan whether or not Prometheus runs here.
    alerts = {"ttft_seconds": float(monitoring.alert_ttft_seconds), "certificate_days": monitoring.alert_certificate_days}
    if not monitoring.enabled:
        return {"enabled": False, "hosts": [], "alerts": alerts}
    port = monitoring.prometheus_port
    # file_sd target files (_observability.targets): engines, routers and the engine hosts' self-heal agents and GPU
    # exporters always (an empty list where none runs), the front doors' and the master's when they run.
    stems = (["engines", "routers", "self-heal", "gpus"] + (["frontdoor"] if monitoring.frontdoor_enabled else [])
             + (["mooncake-master"] if monitoring.mooncake_master_enabled else []))
    return {
        "enabled": True,
        "hosts": sorted(hosts),
        "defaulted": defaulted,
        "alerts": alerts,
        "port": port,
        "unit": _names.PROMETHEUS_UNIT,  # the distribution's; the monitoring role configures and starts it
        "targets_dir": _names.PROMETHEUS_TARGETS_DIR,
        "target_files": [f"{stem}.json" for stem in stems],
        "per_host": {host: {"ip": ips[host], "url": _names.http_url(ips[host], port),
                            "ready_url": _names.http_url(ips[host], port, _names.PROMETHEUS_READY_PATH),
                            "listen_address": f"{ips[host]}:{port}"} for host in sorted(hosts)},
        "listen_ports": {host: [{"service": "prometheus", "purpose": "web", "first": port, "last": port}]
                         for host in sorted(hosts)},
    }
