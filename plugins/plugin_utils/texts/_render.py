# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Turn a plan into file contents. Serialisation only: every value comes from the plan.

The engine role writes exactly these texts to the hosts and the render playbook writes them
to a directory on the controller, so "the files on the host equal `make render`" holds by
construction and is tested in the lab.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..host import _names
from ..plan import _artifacts
from ..plan._planner import gc_paused
from . import _host_files, _nftables, _prometheus, _rsyncd, _yaml
from ._host_files import exec_line

ARGV_FILE = "argv"
PLAN_FILE = "plan.json"


def host_slice(plan: dict, host: str, convert=lambda value: value) -> dict:
    """The parts of ``plan`` one host's files are made of, each passed through ``convert``.

    Filters run once per host: converting the whole plan (every host's pipelines, every peer) for
    each host would make a deploy quadratic in the number of hosts. A monitoring host needs every
    pipeline (its scrape targets); other hosts need their own.
    """
    firewall = plan["firewall"]
    monitoring = plan["monitoring"]
    if host in monitoring.get("per_host", {}):
        hosts = plan["hosts"]
    else:
        hosts = {host: plan["hosts"][host]} if host in plan["hosts"] else {}
    own_firewall = {key: value for key, value in firewall.items() if key not in ("per_host", "peers")}
    own_firewall["per_host"] = {host: firewall["per_host"][host]} if host in firewall.get("per_host", {}) else {}
    # The peer list only where the peers file is rendered: it is the one deployment-wide part.
    own_firewall["peers"] = firewall.get("peers", []) if own_firewall["per_host"] else []
    keep = ("schema", "layout", "paths", "engine", "backend", "kv_transfer", "settings", "hardening", "router",
            "mooncake_master", "monitoring", "served_model_name")
    sliced = {key: convert(plan[key]) for key in keep if key in plan}
    sliced.update({"hosts": convert(hosts), "firewall": convert(own_firewall),
                   "artifacts": convert(_artifacts.host_slice(plan["artifacts"], host)) if "artifacts" in plan else {},
                   "footprint": {host: convert(plan["footprint"][host])} if host in plan.get("footprint", {}) else {},
                   "reserved_ports": {host: convert(plan["reserved_ports"][host])}
                   if host in plan.get("reserved_ports", {}) else {}})
    if host in plan.get("host_platforms", {}):  # the host's own platform (the artifact daemon's group of nobody)
        platform = plan["host_platforms"][host]
        sliced.update({"host_platforms": {host: platform}, "platforms": {platform: convert(plan["platforms"][platform])}})
    # The engine hosts' agents: the deployment's values and this host's entry (a monitoring host: every host's).
    for name in ("self_heal", "gpu_metrics"):
        if name in plan:
            agent = plan[name]
            per_host = (agent["per_host"] if host in monitoring.get("per_host", {}) else
                        {host: agent["per_host"][host]} if host in agent["per_host"] else {})
            sliced[name] = convert({**{k: v for k, v in agent.items() if k != "per_host"}, "per_host": per_host})
    return sliced


def stage_config_text(plan: dict, pipeline: dict, cache: dict | None = None) -> str:
    """The stage config file; ``cache`` (id of a document -> YAML) reuses the body of shared documents."""
    engine = plan["engine"]
    header = (
        f"# vLLM-Omni {engine['vllm_omni_version']} stage config for {pipeline['host']}/{pipeline['name']}"
        f" ({plan['layout']} layout, {engine['stage_config_schema']} schema, loaded with {engine['config_flag']}).\n"
        "# Rendered by vllm_omni.serve from the inventory; edits are overwritten on the next deploy.\n"
    )
    document = pipeline["stage_config"]
    if cache is None:
        return header + _yaml.dump(document)
    if id(document) not in cache:
        cache[id(document)] = _yaml.dump(document)
    return header + cache[id(document)]


def env_text(pipeline: dict) -> str:
    # systemd EnvironmentFile syntax. Values are validated by the planner to need no quoting
    # beyond double quotes (no quotes, backslashes, $ or newlines can reach here).
    lines = [f"# Environment of {pipeline['unit']}. Rendered by vllm_omni.serve; secrets are added on the host only."]
    lines += [f'{key}="{value}"' for key, value in pipeline["environment"].items()]
    return "\n".join(lines) + "\n"


def argv_text(pipeline: dict) -> str:
    return "\n".join(pipeline["argv"]) + "\n"


def dropin_text(pipeline: dict) -> str:
    """The pipeline's drop-in for the vllm-omni@.service template: its environment file and exact argv; a
    distributed head's also its stop (the plan's ``exec_stop``)."""
    text = (
        f"# {pipeline['unit']}: rendered by vllm_omni.serve from the plan; edits are overwritten.\n"
        "[Service]\n"
        f"EnvironmentFile={pipeline['paths']['env_file']}\n"
        "ExecStart=\n"
        f"ExecStart={exec_line(pipeline['argv'])}\n"
    )
    if pipeline.get("exec_stop"):
        text += ("# A distributed head stops once its HTTP server is done (SIGTERM, then its API port watched); what is\n"
                 "# left of the unit then gets SIGKILL, instead of the engine's 30 s orchestrator join (engine facts).\n"
                 "# That SIGKILL is the stop's own: a stopped head is inactive, not failed.\n"
                 f"ExecStop={exec_line(pipeline['exec_stop'])}\n"
                 "KillSignal=SIGKILL\n"
                 "SuccessExitStatus=SIGKILL\n")
    return text


def pipeline_files(plan: dict, pipeline: dict, cache: dict | None = None) -> dict[str, str]:
    """{file name: text} of one pipeline: what the engine role installs, and render.yml writes."""
    return {
        _names.STAGE_CONFIG_FILE: stage_config_text(plan, pipeline, cache),
        _names.ENV_FILE: env_text(pipeline),
        ARGV_FILE: argv_text(pipeline),
        _names.PIPELINE_DROPIN: dropin_text(pipeline),
    }


# One encoder, not one per call. No circular-reference check: a plan is a tree (a cycle would raise
# RecursionError instead of ValueError), and the check's id table costs about 7% of plan.json.
_compact = json.JSONEncoder(sort_keys=True, ensure_ascii=True, check_circular=False).encode
# Sections written one line per host (or per host field and pipeline) so that plan.json diffs stay readable.
_PER_HOST = ("footprint", "listen_ports", "reserved_ports")


def plan_json(plan: dict) -> str:
    """The plan as JSON: one line per setting, host field, pipeline and host footprint.

    (``json.dumps(indent=...)`` falls back to the pure-Python encoder: about 5x slower on a
    1,024-host plan.) Written as pieces joined once: nested joins copied the whole text three times
    (64 MB each at 4,096 hosts). The result is ordinary JSON; ``json.loads`` gives back the plan.
    """
    out: list[str] = ["{\n"]
    write = out.append
    for n, key in enumerate(sorted(plan)):
        write(f",\n {_compact(key)}: " if n else f" {_compact(key)}: ")
        value = plan[key]
        if key not in ("hosts", *_PER_HOST) or not value:
            write(_compact(value))
            continue
        write("{\n")
        for h, host in enumerate(sorted(value)):
            write(",\n" if h else "")
            if key in _PER_HOST:
                write(f"  {_compact(host)}: {_compact(value[host])}")
                continue
            write(f"  {_compact(host)}: {{\n")
            for f, field in enumerate(sorted(value[host])):
                item = value[host][field]
                write(f",\n   {_compact(field)}: " if f else f"   {_compact(field)}: ")
                if field != "pipelines":
                    write(_compact(item))
                elif item:
                    write("[\n" + ",\n".join(f"    {_compact(p)}" for p in item) + "\n   ]")
                else:
                    write("[]")
            write("\n  }")
        write("\n }")
    write("\n}\n")
    return "".join(out)


def render_tree(plan: dict) -> dict[str, str]:
    """{relative path: text} of a whole render directory: the plan, and every file each host's footprint lists.

    Per host, ``<host>/`` holds what lands there (``<host>/<pipeline>/`` the pipeline's files and its
    argv, ``<host>/systemd/`` the units, ...); texts shared by every host (the firewall's peer set,
    Prometheus' targets) are rendered once, at the top.
    """
    with gc_paused():
        return _render_tree(plan)


def _render_tree(plan: dict) -> dict[str, str]:
    tree = {PLAN_FILE: plan_json(plan)}
    targets_dir = plan["monitoring"].get("targets_dir", _names.PROMETHEUS_TARGETS_DIR)
    for path, text in _prometheus.prometheus_files(plan, targets_dir).items():
        tree[f"prometheus/{path}"] = text
    cache: dict = {}
    for host in plan.get("footprint", {}):
        tree.update(host_files(plan, host, cache=cache))
    for host, host_plan in plan["hosts"].items():
        for pipeline in host_plan["pipelines"]:  # argv: not installed, shown for the operator
            tree[f"{host}/{pipeline['name']}/{ARGV_FILE}"] = argv_text(pipeline)
    return tree


MARKER = ".vllm-omni-render"


class RenderDirError(Exception):
    """The destination cannot be used; nothing was written."""


def _existing_files(dest: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(dest.rglob("*")):
        if path.is_file() and path.name != MARKER:
            files[path.relative_to(dest).as_posix()] = path.read_bytes()
    return files


def write_tree(tree: dict[str, str], dest: str, check_mode: bool = False) -> dict:
    """Replace directory ``dest`` by ``tree`` atomically; report added/modified/removed files.

    A directory that exists, is not empty and carries no marker is refused: it is not ours.
    """
    target = Path(dest).expanduser()
    if target.exists() and not target.is_dir():
        raise RenderDirError(f"{target} exists and is not a directory; choose another vllm_omni_render_dir")
    existing: dict[str, bytes] = {}
    if target.is_dir():
        entries = list(target.iterdir())
        if entries and not (target / MARKER).is_file():
            raise RenderDirError(f"{target} is not empty and was not written by render.yml (no {MARKER} file); "
                                 "choose an empty or new directory for vllm_omni_render_dir")
        existing = _existing_files(target)
    wanted = {path: text.encode("utf-8") for path, text in tree.items()}
    added = sorted(set(wanted) - set(existing))
    removed = sorted(set(existing) - set(wanted))
    modified = sorted(p for p in set(wanted) & set(existing) if wanted[p] != existing[p])
    changed = bool(added or removed or modified)
    result = {"changed": changed, "dest": str(target), "files": len(wanted),
              "added": added, "modified": modified, "removed": removed}
    if check_mode or not changed:
        return result
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for path, data in wanted.items():
            file_path = staging / path
            file_path.parent.mkdir(parents=True, exist_ok=True)
            file_path.write_bytes(data)
        (staging / MARKER).write_text("written by vllm_omni.serve render.yml; the whole directory is replaced\n")
        staging.chmod(0o755)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            old.rmdir()
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


# --- every file of one host ---------------------------------------------------------------------


def _host_text(plan: dict, host: str, key: str, cache: dict) -> str:
    """The text of render entry ``key`` (one of ``plan["footprint"][host]["files"]``)."""
    if key == _nftables.RENDER_PEERS_FILE:
        if key not in cache:
            cache[key] = _nftables.peers_text(plan)
        return cache[key]
    if key.startswith("prometheus/targets/") or key == "prometheus/rules.yml":
        if "prometheus" not in cache:
            cache["prometheus"] = _prometheus.prometheus_files(plan, plan["monitoring"]["targets_dir"])
        return cache["prometheus"][key.removeprefix("prometheus/")]
    local = key.removeprefix(f"{host}/")
    kind, _sep, name = local.partition("/")
    if local == _nftables.RENDER_RULESET_FILE:
        return _nftables.ruleset_text(plan, host)
    if kind == "systemd" and name.startswith("nftables.service.d/"):
        return _host_files.nftables_dropin(plan)
    if kind == "systemd":
        return _systemd_text(plan, host, name, cache)
    if kind == "sysctl":
        return _host_files.sysctl_text(plan, host)
    if kind == "router":
        return _host_files.router_shape_text(plan, host)
    if kind == "artifacts":
        return _rsyncd.host_rsyncd_text(plan, host)
    if kind == "frontdoor":
        return _host_files.frontdoor_config(plan, host)
    if kind == "self-heal":
        return _host_files.self_heal_config(plan, host)
    if kind == "gpu-metrics":
        return _host_files.gpu_metrics_config(plan, host)
    if kind == "prometheus":
        if name == "prometheus.yml":
            return _host_files.prometheus_config(
                plan, host, _prometheus.scrape_configs(plan, plan["monitoring"]["targets_dir"]))
        return _host_files.prometheus_defaults(plan, host)
    pipeline = next(p for p in plan["hosts"][host]["pipelines"] if p["name"] == kind)
    return pipeline_files(plan, pipeline, cache.setdefault("documents", {}))[name]


def _systemd_text(plan: dict, host: str, unit: str, cache: dict) -> str:
    if unit == _names.ENGINE_UNIT_TEMPLATE:
        if unit not in cache:  # the same on every engine host
            cache[unit] = _host_files.engine_template_unit(plan)
        return cache[unit]
    if unit == _names.ROUTER_UNIT:
        return _host_files.router_unit(plan, host)
    if unit == _names.MASTER_UNIT:
        return _host_files.master_unit(plan, host)
    # The engine hosts' agents: the same unit on every host of one platform (only the interpreter differs).
    agents = {_names.SELF_HEAL_UNIT: ("self_heal", _host_files.self_heal_unit),
              _names.GPU_METRICS_UNIT: ("gpu_metrics", _host_files.gpu_metrics_unit)}
    if unit in agents:
        section, text = agents[unit]
        key = (unit, plan[section]["per_host"][host]["python"])
        if key not in cache:
            cache[key] = text(plan, host)
        return cache[key]
    if unit not in cache:
        cache[unit] = _host_files.firewall_unit(plan)
    return cache[unit]


def install_set(plan: dict, host: str, components: list[str], validate: dict[str, str] | None = None,
                paths: list[str] | None = None) -> dict[str, list[dict]]:
    """What the plan_files module puts in place for ``components`` on ``host``: their directories, and
    their rendered files with texts (files the render cannot hold, ``render`` None, are left to the
    roles that make them). ``validate``: file name suffix -> check command. ``paths``: only the files
    with these paths (the components' directories are all listed)."""
    footprint = plan["footprint"].get(host, {"directories": [], "files": []})
    directories = [{key: entry[key] for key in ("path", "owner", "group", "mode")}
                   for entry in footprint["directories"] if entry["component"] in components]
    files = []
    cache: dict = {}
    for entry in footprint["files"]:
        if entry["render"] is None or entry["component"] not in components or (paths is not None
                                                                               and entry["path"] not in paths):
            continue
        item = {key: entry[key] for key in ("path", "owner", "group", "mode")}
        item["content"] = _host_text(plan, host, entry["render"], cache)
        checks = [command for suffix, command in (validate or {}).items() if entry["path"].endswith(suffix)]
        if checks:
            item["validate"] = checks[0]
        files.append(item)
    return {"directories": directories, "files": files}


def host_files(plan: dict, host: str, components: list[str] | None = None, cache: dict | None = None) -> dict[str, str]:
    """{render key: text} of every file the plan's footprint installs on ``host`` (or those of ``components``)."""
    cache = {} if cache is None else cache
    return {entry["render"]: _host_text(plan, host, entry["render"], cache)
            for entry in plan["footprint"].get(host, {}).get("files", [])
            if entry["render"] is not None and (components is None or entry["component"] in components)}
