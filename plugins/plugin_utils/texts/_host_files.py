# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The texts of every file a deploy installs outside the pipelines' own: units, kernel settings,
the router's restart marker, Prometheus' configuration. Serialisation only: every value is the plan's.

``files_of(plan, host)`` gives ``{render key: text}`` for what ``plan["footprint"][host]`` lists;
``render.yml`` writes the same texts and the roles copy them, so a render directory is what lands
on the hosts, byte for byte (engine.env plus the host-only secrets block aside).
"""

from __future__ import annotations

import json
import re

from ..host import _names
from ..plan import _gpu_metrics, _hardening, _secrets, _self_heal
from . import _yaml

# Engine units: restart with back-off; a cold model load can exceed 10 minutes.
ENGINE_RESTART_SEC = 15
ENGINE_START_LIMIT = (900, 5)  # (interval seconds, starts) before systemd gives up
ENGINE_STOP_TIMEOUT = 120  # in-flight requests finish
START_MARGIN = 600  # TimeoutStartSec = the engine's own --init-timeout + this
LIMIT_NOFILE = 1048576
# Kernel settings (Mooncake): large registrations map many regions.
VM_MAX_MAP_COUNT = 1048576
PROMETHEUS_SCRAPE_INTERVAL = "15s"
PROMETHEUS_RETENTION = "15d"
DOCUMENTATION = "https://github.com/vllm-omni-serve/vllm_omni.serve"

_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:=,@+-]+")


def systemd_word(word: str) -> str:
    """One ExecStart= argument: bare when safe, else quoted (systemd.service "Command lines")."""
    if _SYSTEMD_PLAIN.fullmatch(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def exec_line(argv: list[str]) -> str:
    return " ".join(systemd_word(word) for word in argv)


def directives_text(entries: list[dict]) -> str:
    """systemd [Service] lines for the plan's hardening entries; a dropped directive stays as a comment."""
    lines = []
    for entry in entries:
        if entry["why"]:
            lines.append(f"# {entry['directive']}: {entry['why']}")
        if entry["value"] is None:
            lines.append(f"# {entry['directive']} not set")
        else:
            lines.append(f"{entry['directive']}={entry['value']}")
    return "\n".join(lines)


def _unit(header: list[str], unit: list[str], service: list[str], hardening: list[dict]) -> str:
    return "\n".join([
        *(f"# {line}" for line in header),
        "[Unit]", *unit, "",
        "[Service]", *service,
        "# Sandbox (docs/security.md has the exposure scores).",
        directives_text(hardening), "",
        "[Install]", "WantedBy=multi-user.target", "",
    ])


def _network_online(plan: dict | None = None) -> list[str]:
    """Start after the network; with the firewall on, only once its table is loaded (fail closed: if the
    table cannot load, the service does not start, and stopping the firewall stops the service)."""
    lines = ["After=network-online.target", "Wants=network-online.target"]
    if plan is not None and plan["firewall"]["enabled"]:
        unit = _names.FIREWALL_UNIT
        lines += [f"# Never serve unfiltered: no {unit}, no service.", f"Requires={unit}", f"After={unit}"]
    return lines


def _driver_modules(plan: dict) -> list[str]:
    """The real engine's device allow-list (DeviceAllow=char-nvidia-uvm ...) is resolved against /proc/devices
    when the unit starts: a driver module loaded later (CUDA loads nvidia-uvm at its first use, through a
    setuid helper NoNewPrivileges stops anyway) would stay refused. So the modules load first (systemd's
    modprobe@ units; a missing module is ignored, as on hosts without RDMA)."""
    if plan["backend"]["name"] != "engine":
        return []
    units = " ".join(f"modprobe@{module}.service" for module in _hardening.ENGINE_DRIVER_MODULES)
    return ["# Load the device drivers before the device allow-list is resolved (docs/security.md).",
            f"Wants={units}", f"After={units}"]


def engine_template_unit(plan: dict) -> str:
    user, group, home = _names.ENGINE_ACCOUNT
    interval, burst = ENGINE_START_LIMIT
    init_timeout = plan["backend"]["start"]["timeout"]  # vllm_omni_init_timeout
    return _unit(
        [f"{plan['paths']['engine_unit_template']}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
         "One instance per pipeline: vllm-omni@<pipeline>.service. Each instance's drop-in",
         f"vllm-omni@<pipeline>.service.d/{_names.PIPELINE_DROPIN} holds its EnvironmentFile and exact ExecStart;",
         "`systemctl cat vllm-omni@<pipeline>` shows both."],
        ["Description=vLLM-Omni pipeline %i (vllm_omni.serve)", f"Documentation={DOCUMENTATION}",
         *_network_online(plan), *_driver_modules(plan), f"StartLimitIntervalSec={interval}",
         f"StartLimitBurst={burst}"],
        ["Type=simple", f"User={user}", f"Group={group}", f"WorkingDirectory={home}",
         "# always, not on-failure: when one stage's engine process dies, vLLM-Omni 0.26's API server shuts",
         "# down cleanly and exits 0 (SIGKILL of a stage on an H200: docs/gpu-evidence.md), which on-failure",
         "# would leave down. A stop by systemctl is never restarted.",
         "Restart=always",
         f"RestartSec={ENGINE_RESTART_SEC}", f"TimeoutStartSec={init_timeout + START_MARGIN}",
         f"TimeoutStopSec={ENGINE_STOP_TIMEOUT}",
         "# Mooncake registers GPU memory for RDMA; vLLM opens many sockets and files.",
         "LimitMEMLOCK=infinity", f"LimitNOFILE={LIMIT_NOFILE}", "SyslogIdentifier=vllm-omni-%i"],
        plan["hardening"]["engine"])


def router_unit(plan: dict, host: str) -> str:
    user, group, _unused = _names.ROUTER_ACCOUNT
    return _unit(
        [f"{_names.unit_path(_names.ROUTER_UNIT)}: rendered by vllm_omni.serve from the plan.",
         "vllm-router in front of every pipeline of the plan. Clients authenticate with the API key the",
         "pipelines enforce (vllm-router forwards the Authorization header; its own --api-key is only",
         "used towards workers, so it is not set here)."],
        ["Description=vLLM-Omni router (vllm_omni.serve)", *_network_online(plan)],
        ["Type=simple", f"User={user}", f"Group={group}",
         f"ExecStart={exec_line(plan['router']['per_host'][host]['argv'])}",
         "Restart=on-failure", "RestartSec=5", f"LimitNOFILE={LIMIT_NOFILE}", "SyslogIdentifier=vllm-omni-router"],
        plan["hardening"]["router"])


def router_shape(argv: list[str]) -> list[str]:
    """The router's argv without its worker list: membership changes live, anything else restarts it."""
    shape, skipping = [], False
    for word in argv:
        if word == "--worker-urls":
            shape.append(word)
            skipping = True
            continue
        if skipping and not str(word).startswith("--"):
            continue
        skipping = False
        shape.append(word)
    return shape


def router_shape_text(plan: dict, host: str) -> str:
    return json.dumps(router_shape(plan["router"]["per_host"][host]["argv"]), indent=4) + "\n"


def frontdoor_key_map(keys: str | list[str], upstream: str | None = None) -> str:
    """The front door's key map: one entry per key a client may send, ``"~^Bearer <key>$" "Bearer <upstream>";``.

    ``keys``: the keys clients may send (vllm_omni_api_keys, or vllm_omni_api_key alone); ``upstream``: the
    key the engines check (vllm_omni_api_key; default: the only key given), which nginx sends on in place
    of the client's. A request whose header matches no entry maps to "" and is refused (401).

    Each entry is case-sensitive (plain map strings are not): every character other than a letter or
    digit stands in a character class of its own (``[.]``), so nothing in the key is a regular expression
    operator or an nginx escape. Every key is a bearer token (``_secrets.API_KEY``: no quote, backslash,
    ``$`` or space, so the value needs no escaping either); the secrets check has refused anything else
    before a host is touched.
    """
    keys = [keys] if isinstance(keys, str) else list(keys)
    if upstream is None and len(keys) == 1:
        upstream = keys[0]
    if not keys or upstream is None:
        raise ValueError("frontdoor_key_map: no key given (or, for several keys, no upstream key)")
    for key in [*keys, upstream]:
        if not isinstance(key, str) or not _secrets.API_KEY.fullmatch(key):
            raise ValueError("frontdoor_key_map: an API key is not a bearer token (the secrets check refuses it)")
    lines = []
    for key in dict.fromkeys(keys):
        pattern = "".join(c if c.isascii() and c.isalnum() else f"[{c}]" for c in key)
        lines.append(f'"~^Bearer {pattern}$" "Bearer {upstream}";\n')
    return "".join(lines)


def _frontdoor_proxy(router: dict, backend: str) -> list:
    """The /v1/ location's proxy directives: on to the router, streamed, the upstream key swapped in."""
    timeout = router["request_timeout"]
    return [f"        proxy_pass {backend};", "        proxy_http_version 1.1;",
            '        proxy_set_header Connection "";', "        proxy_set_header Host $host;",
            "        proxy_set_header X-Forwarded-For $remote_addr;",
            *(["        proxy_set_header Authorization $vllm_omni_upstream_authorization;"]
              if router["api_key_required"] else []),
            "        # Streamed completions: pass every chunk on as it comes.",
            "        proxy_buffering off;", f"        proxy_read_timeout {timeout}s;", f"        proxy_send_timeout {timeout}s;"]


def _frontdoor_checks(router: dict) -> list:
    """The /v1/ location's refusals: paths that are not plain, and (where a key is required) a wrong key."""
    # Only plain paths go on: nginx matched the normalised path, and the router must see that same path
    # (no dot segments, no percent-encoding, no doubled slashes in what is sent on as it came).
    path_check = ["    if ($request_uri ~ \"^[^?]*(%|/\\.|//)\") { return 404 '{\"error\": \"not found\"}\\n'; }"]
    # The key map gives the Authorization header the engines check (vllm_omni_api_key) for every key a
    # client may send ("" for anything else): a key rotation changes this file and reloads nginx only.
    refused = "return 401 '{\"error\": \"missing or wrong API key\"}\\n';"
    key_check = ([f'    if ($vllm_omni_upstream_authorization = "") {{ {refused} }}'] if router["api_key_required"] else [])
    return path_check + key_check


def _frontdoor_head(router: dict, frontdoor: dict) -> list:
    """The site's header comment, its log format and (where a key is required) the key map."""
    lines = [
        f"# {frontdoor['config']}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
        "# The router's front door: TLS, the API key checked here (and again by the engines), only the",
        "# OpenAI routes and health forwarded to vllm-router on loopback; its admin endpoints stay unreachable.",
        "# The access log never holds the Authorization header.",
        "log_format vllm_omni '$remote_addr [$time_local] \"$request_method $uri\" $status $body_bytes_sent '",
        "                     'upstream=$upstream_addr rt=$request_time';",
    ]
    if router["api_key_required"]:
        lines += ["map $http_authorization $vllm_omni_upstream_authorization {", '    default "";',
                  f"    include {frontdoor['api_keys']};", "}"]
    return lines


def frontdoor_config(plan: dict, host: str) -> str:
    """nginx's site for the front door: TLS on the router port, the API key checked, OpenAI routes only.

    The key map it includes (``frontdoor.api_keys``) is written on the host only; without a required
    key every client is let through (and the engines answer without one too).
    """
    router, frontdoor = plan["router"], plan["router"]["frontdoor"]
    ip, port = router["per_host"][host]["ip"], router["port"]
    backend = router["per_host"][host]["admin_url"]
    lines = [
        *_frontdoor_head(router, frontdoor),
        "server {",
        f"    listen {ip}:{port} ssl;",
        f"    ssl_certificate {frontdoor['certificate']};",
        f"    ssl_certificate_key {frontdoor['certificate_key']};",
        "    ssl_protocols TLSv1.2 TLSv1.3;",
        "    server_tokens off;",
        "    client_max_body_size 64m;  # audio, image and video inputs",
        f"    access_log {frontdoor['access_log']} vllm_omni;",
        "    location /v1/ {",
        *("    " + line for line in _frontdoor_checks(router)),
        *_frontdoor_proxy(router, backend),
        "    }",
        # Health, for load balancers and the collection's checks: no key, nothing but the status.
        f"    location = {_names.HEALTH_PATH} {{ proxy_pass {backend}; }}",
        f"    location = {_names.READINESS_PATH} {{ proxy_pass {backend}; }}",
        # The door's own metrics (its certificate's expiry, as installed), for Prometheus: public facts only.
        f"    location = {_names.METRICS_PATH} {{",
        '        default_type "text/plain; version=0.0.4";',
        f"        alias {frontdoor['metrics']};",
        "        access_log off;",
        "    }",
        "    # Everything else (the router's /add_worker, /remove_worker, /list_workers, ...) does not exist here.",
        "    location / { return 404 '{\"error\": \"not found\"}\\n'; }",
        "}",
        "",
    ]
    return "\n".join(lines)


def master_unit(plan: dict, host: str) -> str:
    user, group, _unused = _names.MASTER_ACCOUNT
    return _unit(
        [f"{_names.unit_path(_names.MASTER_UNIT)}: rendered by vllm_omni.serve from the plan.",
         "mooncake_master for Mooncake store connectors, bound to this host's address. The embedded HTTP",
         "metadata server stays off: it ignores --http_metadata_server_host and binds every interface."],
        ["Description=Mooncake master (vllm_omni.serve)", *_network_online(plan)],
        ["Type=simple", f"User={user}", f"Group={group}",
         f"ExecStart={exec_line(plan['mooncake_master']['per_host'][host]['argv'])}",
         "Restart=on-failure", "RestartSec=5", "LimitMEMLOCK=infinity", f"LimitNOFILE={LIMIT_NOFILE}"],
        plan["hardening"]["mooncake_master"])


def self_heal_unit(plan: dict, host: str) -> str:
    heal = plan["self_heal"]
    python = heal["per_host"][host]["python"]
    return _unit(
        [f"{heal['unit_file']}: rendered by vllm_omni.serve from the plan.",
         "The self-heal agent: restarts an engine process of this host that is up but cannot serve, within the",
         f"bounds of {heal['config']} (docs/operations.md, \"Self-healing\"); its metrics on port {heal['port']}."],
        ["Description=vLLM-Omni self-heal agent (vllm_omni.serve)", *_network_online(plan)],
        ["Type=simple", f"ExecStart={python} {heal['program']} {heal['config']}", "Restart=always", "RestartSec=5",
         "SyslogIdentifier=vllm-omni-heal"],
        plan["hardening"]["self_heal"])


def self_heal_config(plan: dict, host: str) -> str:
    return json.dumps(_self_heal.host_config(plan["self_heal"], host), indent=1, sort_keys=True) + "\n"


def gpu_metrics_unit(plan: dict, host: str) -> str:
    exporter = plan["gpu_metrics"]
    python = exporter["per_host"][host]["python"]
    return _unit(
        [f"{exporter['unit_file']}: rendered by vllm_omni.serve from the plan.",
         "The GPU health exporter: nvidia-smi's per-GPU values and the kernel log's Xid errors for Prometheus,",
         f"on port {exporter['port']} ({exporter['config']}; docs/operations.md, \"GPU health\")."],
        ["Description=vLLM-Omni GPU health exporter (vllm_omni.serve)", *_network_online(plan)],
        ["Type=simple", f"ExecStart={python} {exporter['program']} {exporter['config']}", "Restart=always",
         "RestartSec=5", "SyslogIdentifier=vllm-omni-gpu-metrics"],
        plan["hardening"]["gpu_metrics"])


def gpu_metrics_config(plan: dict, host: str) -> str:
    return json.dumps(_gpu_metrics.host_config(plan["gpu_metrics"], host), indent=1, sort_keys=True) + "\n"


def firewall_unit(plan: dict) -> str:
    firewall = plan["firewall"]
    nft_load = f"/usr/sbin/nft -f {firewall['ruleset_file']}"
    return _unit(
        [f"{_names.unit_path(_names.FIREWALL_UNIT)}: rendered by vllm_omni.serve from the plan.",
         f"Loads {firewall['ruleset_file']} (table inet {firewall['table']}, which includes {firewall['peers_file']}).",
         "Stopping it deletes that table only, and stops the services that require it (fail closed).",
         "nftables.service's reload flushes the whole ruleset: ReloadPropagatedFrom loads ours again after it;",
         f"its start and stop are followed by the same load ({_names.NFTABLES_DROPIN})."],
        [f"Description=vLLM-Omni firewall (nftables table inet {firewall['table']}; vllm_omni.serve)",
         "After=nftables.service", "ReloadPropagatedFrom=nftables.service", "Before=network-online.target"],
        ["Type=oneshot", "RemainAfterExit=yes", f"ExecStart={nft_load}", f"ExecReload={nft_load}",
         f"ExecStop=-/usr/sbin/nft delete table inet {firewall['table']}"],
        plan["hardening"]["firewall"])


def nftables_dropin(plan: dict) -> str:
    """nftables.service's start and stop run `flush ruleset`: our table goes with it. Load it right back."""
    nft_load = f"-/usr/sbin/nft -f {plan['firewall']['ruleset_file']}"
    return "\n".join([
        f"# {_names.NFTABLES_DROPIN}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
        "# nftables.service flushes the whole ruleset when it starts and when it stops; the engines keep",
        f"# listening, so table inet {plan['firewall']['table']} is loaded again right after either.",
        "[Service]", f"ExecStartPost={nft_load}", f"ExecStopPost={nft_load}", ""])


def sysctl_text(plan: dict, host: str) -> str:
    lines = [f"# {_names.MOONCAKE_SYSCTL}: rendered by vllm_omni.serve from the plan (Mooncake kernel settings).",
             "# Large transfer-engine registrations map many regions.",
             f"vm.max_map_count = {VM_MAX_MAP_COUNT}",
             "# Every port the plan puts on this host, kept out of the ephemeral range so an outgoing",
             "# connection never holds one when a unit restarts.",
             f"net.ipv4.ip_local_reserved_ports = {plan['reserved_ports'][host]}"]
    if plan["kv_transfer"]["mooncake_protocol"] == "tcp":
        lines += ["# TCP transfers open many short connections.", "net.ipv4.tcp_tw_reuse = 1"]
    return "\n".join(lines) + "\n"


def prometheus_config(plan: dict, host: str, scrape_configs: list[dict]) -> str:
    listen = plan["monitoring"]["per_host"][host]["listen_address"]
    document = {
        "global": {"scrape_interval": PROMETHEUS_SCRAPE_INTERVAL, "evaluation_interval": PROMETHEUS_SCRAPE_INTERVAL,
                   "external_labels": {"deployment": "vllm-omni"}},
        "rule_files": [_names.PROMETHEUS_RULES],
        "scrape_configs": [*scrape_configs, {"job_name": "prometheus", "static_configs": [{"targets": [listen]}]}],
    }
    return (f"# {_names.PROMETHEUS_CONFIG}: rendered by vllm_omni.serve from the plan; edits are overwritten.\n"
            + _yaml.dump(document))


def prometheus_defaults(plan: dict, host: str) -> str:
    listen = plan["monitoring"]["per_host"][host]["listen_address"]
    return (f"# {_names.PROMETHEUS_DEFAULTS}: rendered by vllm_omni.serve from the plan (the packaged unit's ARGS).\n"
            f'ARGS="--web.listen-address={listen} --storage.tsdb.retention.time={PROMETHEUS_RETENTION}"\n')
