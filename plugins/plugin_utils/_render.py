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
import re
import shutil
import tempfile
from pathlib import Path

from . import _firewall, _observability, _yaml
from ._planner import PIPELINE_DROPIN as DROPIN_FILE

STAGE_CONFIG = "stage_config.yaml"
ENV_FILE = "engine.env"
ARGV_FILE = "argv"
PLAN_FILE = "plan.json"


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


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:=,@+-]+")


def systemd_word(word: str) -> str:
    """One ExecStart= argument: bare when safe, else quoted (systemd.service "Command lines")."""
    if _SYSTEMD_PLAIN.fullmatch(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


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


def dropin_text(pipeline: dict) -> str:
    """The pipeline's drop-in for the vllm-omni@.service template: its environment file and exact argv."""
    return (
        f"# {pipeline['unit']}: rendered by vllm_omni.serve from the plan; edits are overwritten.\n"
        "[Service]\n"
        f"EnvironmentFile={pipeline['paths']['env_file']}\n"
        "ExecStart=\n"
        f"ExecStart={' '.join(systemd_word(word) for word in pipeline['argv'])}\n"
    )


def pipeline_files(plan: dict, pipeline: dict, cache: dict | None = None) -> dict[str, str]:
    """{file name: text} of one pipeline: what the engine role installs, and render.yml writes."""
    return {
        STAGE_CONFIG: stage_config_text(plan, pipeline, cache),
        ENV_FILE: env_text(pipeline),
        ARGV_FILE: argv_text(pipeline),
        DROPIN_FILE: dropin_text(pipeline),
    }


def _compact(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def _json_object(items: list[tuple[str, str]], indent: str) -> str:
    """``{"key": <already-encoded value>, ...}`` one member per line, keys sorted."""
    inner = indent + " "
    members = [f"{inner}{_compact(key)}: {text}" for key, text in sorted(items)]
    return "{\n" + ",\n".join(members) + f"\n{indent}}}"


def plan_json(plan: dict) -> str:
    """The plan as JSON: one line per setting, host field and pipeline, so diffs stay readable.

    (``json.dumps(indent=...)`` falls back to the pure-Python encoder: about 5x slower on a
    1,024-host plan.) The result is ordinary JSON; ``json.loads`` gives back the plan.
    """
    top = []
    for key, value in plan.items():
        if key == "hosts":
            hosts = []
            for host, host_plan in value.items():
                fields = []
                for field, item in host_plan.items():
                    if field == "pipelines":
                        pipelines = ",\n".join(f"    {_compact(p)}" for p in item)
                        fields.append((field, f"[\n{pipelines}\n   ]" if item else "[]"))
                    else:
                        fields.append((field, _compact(item)))
                hosts.append((host, _json_object(fields, "  ")))
            top.append((key, _json_object(hosts, " ") if hosts else "{}"))
        else:
            top.append((key, _compact(value)))
    return _json_object(top, "") + "\n"


def render_tree(plan: dict) -> dict[str, str]:
    """{relative path: text} of a whole render directory."""
    tree = {PLAN_FILE: plan_json(plan)}
    targets_dir = (plan.get("monitoring") or {}).get("targets_dir", "/etc/prometheus/vllm-omni")
    for path, text in _observability.prometheus_files(plan, targets_dir).items():
        tree[f"prometheus/{path}"] = text
    for host in plan.get("firewall", {}).get("per_host", {}):
        tree[f"{host}/firewall.nft"] = _firewall.ruleset_text(plan, host)
    cache: dict[int, str] = {}
    for host, host_plan in plan["hosts"].items():
        for pipeline in host_plan["pipelines"]:
            for name, text in pipeline_files(plan, pipeline, cache).items():
                tree[f"{host}/{pipeline['name']}/{name}"] = text
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
