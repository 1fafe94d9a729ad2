# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Artifacts (wheel sets and model weights): which hosts need which, and the tree that carries them.

The controller sends each artifact once. The first host that needs it pulls it from the
controller; every host that holds it then serves it to one more host per round (rsync daemons,
read-only, each module open only to the hosts that pull from it), so after round ``r`` ``2**r``
hosts hold it and 1,000 hosts are served in 11 rounds with one copy out of the controller. A host
whose parent failed pulls from the controller instead (roles/artifacts). Every host checks every
file against the manifest the controller wrote (sha256 and size) before anything installs from it:
a peer can slow a deploy down, never change what it installs.

The plan's ``artifacts`` section (see :func:`artifacts_plan`) names every artifact, where it lies on
the hosts, which hosts hold it, each host's parent and round, and each serving host's rsyncd.conf
(the render writes it; the footprint lists it).
"""

from __future__ import annotations

import hashlib
import re

from ..host import _names
from ..plan._problems import ALL_HOSTS, Problems

CONTROLLER = "controller"  # a host's parent when it pulls from the controller itself
COMMIT = re.compile(r"[0-9a-f]{40}")


def wheel_set_id(lock: dict, uv_lock: dict) -> str:
    """A wheel set: one lock's wheels plus uv's for one platform, named by both locks' hashes (the controller's
    cache key)."""
    digest = hashlib.sha1((lock["sha256"] + uv_lock["sha256"]).encode(), usedforsecurity=False).hexdigest()
    return f"{lock['name']}-{lock['platform']}-{digest[:12]}"


def model_repo_dir(hf_home: str, model: str) -> str:
    """The Hugging Face cache directory of a repository under ``HF_HOME`` (huggingface_hub's layout)."""
    return f"{hf_home}/hub/models--{model.replace('/', '--')}"


def check_model_source(settings: dict, problems: Problems) -> None:
    """The model source settings agree with each other (the planner calls this with valid settings)."""
    source = settings["vllm_omni_model_source"]
    if source == "none":
        return
    model, revision = settings["vllm_omni_model"], settings["vllm_omni_model_revision"]
    if model.startswith("/"):
        problems.add(ALL_HOSTS, "vllm_omni_model", f"is the path {model}, but vllm_omni_model_source is {source}: "
                     "staged weights are found by their repository id", "set vllm_omni_model to the repository id "
                     "(org/name) the weights belong to")
    if source == "hub" and (revision is None or not COMMIT.fullmatch(revision)):
        problems.add(ALL_HOSTS, "vllm_omni_model_revision", f"is {revision!r}; a hub source is pinned to one commit",
                     "set it to the 40-character commit id of the revision to serve (the repository's "
                     "'History' page, or `hf api` / HfApi().model_info(repo).sha)")
    if source == "directory" and revision is None:
        problems.add(ALL_HOSTS, "vllm_omni_model_revision", "is unset; a directory source needs a name for what it holds",
                     "name the copy, e.g. its commit id or a date (2026-11-30); a new name restarts the engines on it")
    if source == "directory" and settings["vllm_omni_model_directory"] is None:
        problems.add(ALL_HOSTS, "vllm_omni_model_directory", "is unset, but vllm_omni_model_source is directory",
                     "set it to the controller directory that holds the model's files (config.json, *.safetensors)")


def _model_artifact(settings: dict, paths: dict, engine_hosts: list[str]) -> dict | None:
    source = settings["vllm_omni_model_source"]
    if source == "none" or not engine_hosts:
        return None
    model, revision = settings["vllm_omni_model"], settings["vllm_omni_model_revision"]
    repo_dir = model_repo_dir(paths["hf_home"], model)
    slug = re.sub(r"[^A-Za-z0-9._-]", "-", model.replace("/", "--"))
    return {
        "id": f"model-{slug}-{revision}",
        "kind": "model",
        "model": model,
        "revision": revision,
        "source": {"kind": source, "directory": settings["vllm_omni_model_directory"]},
        # Where huggingface_hub looks offline: refs/main names the snapshot the engines load.
        "host_dir": f"{repo_dir}/snapshots/{revision}",
        "ref_file": f"{repo_dir}/refs/main",
        "repo_dir": repo_dir,
        "hosts": sorted(engine_hosts),
        # Relative to the controller's cache; an operator's directory (source.directory) is used where it is.
        "controller_dir": f"{_names.CONTROLLER_MODELS}/model-{slug}-{revision}",
    }


def _wheel_artifacts(plan: dict) -> list[dict]:
    """One wheel set per lock and platform that some host installs, with the hosts that install it."""
    wanted: dict[str, dict] = {}

    def want(lock_name: str, hosts) -> None:
        for host in sorted(hosts):
            platform = plan["host_platforms"][host]
            locks = plan["locks"][platform]
            lock, uv_lock = locks[lock_name], locks[plan["installer"]["uv_lock"]]
            set_id = wheel_set_id(lock, uv_lock)
            entry = wanted.setdefault(set_id, {"id": set_id, "kind": "wheels", "platform": platform, "lock": lock,
                                               "uv_lock": uv_lock, "host_dir": f"{_names.HOST_WHEELHOUSE}/{set_id}",
                                               "hosts": []})
            entry["hosts"].append(host)

    want(plan["backend"]["lock"], [h for h, section in plan["hosts"].items() if section["pipelines"]])
    want(plan["router"]["lock"], plan["router"]["per_host"])
    if plan["mooncake_master"]["enabled"]:
        want(plan["mooncake_master"]["lock"], plan["mooncake_master"]["per_host"])
    for entry in wanted.values():
        entry["hosts"] = sorted(set(entry["hosts"]))
        entry["controller_dir"] = f"{_names.CONTROLLER_WHEELHOUSE}/{entry['id']}"
    return [wanted[key] for key in sorted(wanted)]


def distribution_tree(hosts: list[str]) -> dict[str, dict]:
    """host -> {parent, round}: host 0 pulls from the controller in round 0; in round r >= 1 hosts
    2**(r-1) .. 2**r - 1 each pull from the host 2**(r-1) places before them, which got it earlier.
    Every holder serves at most one host per round and the controller exactly one."""
    tree = {}
    for index, host in enumerate(hosts):
        level = index.bit_length()  # 0 for the first host, r for 2**(r-1) <= index < 2**r
        parent = CONTROLLER if index == 0 else hosts[index - (1 << (level - 1))]
        tree[host] = {"parent": parent, "round": level}
    return tree


def _wheel_sets(items: list[dict]) -> dict[str, dict[str, str]]:
    sets: dict[str, dict[str, str]] = {}
    for item in items:
        if item["kind"] == "wheels":
            sets.setdefault(item["platform"], {})[item["lock"]["name"]] = item["host_dir"]
    return dict(sorted(sets.items()))


def artifacts_plan(settings: dict, plan: dict, ips: dict[str, str | None]) -> dict:
    """The plan's ``artifacts`` section: every artifact, its hosts and tree, and each host's share of it."""
    items = _wheel_artifacts(plan)
    model = _model_artifact(settings, plan["paths"], [h for h, s in plan["hosts"].items() if s["pipelines"]])
    if model:
        items.append(model)
    for item in items:  # the manifest each copy is checked against: on the controller (relative) and on a host
        item["controller_manifest"] = f"{_names.CONTROLLER_ARTIFACTS}/{item['id']}.json"
        item["manifest"] = f"{_names.ARTIFACT_MANIFEST_DIR}/{item['id']}.json"
    port = settings["vllm_omni_artifact_port"]
    per_host: dict[str, dict] = {}
    controller_children: dict[str, list[str]] = {}
    rounds = 0
    for artifact in items:
        for host, node in distribution_tree(artifact["hosts"]).items():
            entry = per_host.setdefault(host, {"address": ips[host], "artifacts": [], "pulls": {}, "children": {}})
            entry["artifacts"].append(artifact["id"])
            parent = node["parent"]
            # The parent's module; None when the controller is the parent (its address is known at run time).
            entry["pulls"][artifact["id"]] = {"parent": parent, "round": node["round"],
                                              "address": None if parent == CONTROLLER else ips[parent],
                                              "url": None if parent == CONTROLLER
                                              else f"rsync://{ips[parent]}:{port}/{artifact['id']}"}
            rounds = max(rounds, node["round"] + 1)
            if parent == CONTROLLER:
                controller_children.setdefault(artifact["id"], []).append(ips[host])
            else:
                per_host[parent]["children"].setdefault(artifact["id"], []).append(ips[host])
    for entry in per_host.values():
        entry["serves"] = bool(entry["children"])
    return {
        "port": port,
        # The wheel set each venv installs from, on its hosts (python_venv_wheel_dir): platform -> lock -> dir.
        "wheel_sets": _wheel_sets(items),
        "controller_address": settings["vllm_omni_artifact_controller_address"],
        "unit": _names.ARTIFACT_UNIT,
        "config_file": _names.ARTIFACT_CONFIG,
        "manifest_dir": _names.ARTIFACT_MANIFEST_DIR,
        "controller": _names.controller_layout(),  # the controller cache's layout, relative to it
        "rounds": rounds,
        "items": items,
        "controller_children": controller_children,
        "per_host": dict(sorted(per_host.items())),
    }


def listen_ports(plan: dict) -> dict[str, list[dict]]:
    """The rsync daemon's port on every host holding an artifact (open to inventory peers only).

    On every such host, not only the ones serving now: a host added to the inventory moves the tree,
    and must not change (and reload) the firewall of every other host."""
    port = plan["artifacts"]["port"]
    return {host: [{"service": "artifacts", "purpose": "rsync", "first": port, "last": port}]
            for host in plan["artifacts"]["per_host"]}


def host_slice(section: dict, host: str) -> dict:
    """The artifacts section as one host's files need it: its own entry and the artifacts it holds."""
    entry = section["per_host"].get(host)
    mine = set(entry["artifacts"]) if entry else set()
    # What is the controller's (its cache's layout, its children) stays out: a host's files never name it.
    return {**{key: value for key, value in section.items()
               if key not in ("items", "per_host", "controller_children", "controller")},
            "items": [{k: v for k, v in item.items() if k not in ("hosts", "controller_dir", "controller_manifest")}
                      for item in section["items"] if item["id"] in mine],
            "per_host": {host: entry} if entry else {}, "controller_children": {}}


# What a model directory on the controller must hold to be one (a `hf download --local-dir` result).
MODEL_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
MODEL_DIR_MAX_FILES = 100_000  # a model is a few hundred files; more is the wrong directory


def model_directory_problems(directory: str, weights_needed: bool = True) -> list[str]:
    """``vllm_omni_model_directory`` on the controller: a directory holding config.json (a JSON object) and weights,
    whose links stay inside it or point into a Hugging Face cache's blobs (what `hf download` leaves). Read before
    anything is sent; never follows a link out to walk it."""
    import json
    import os
    from pathlib import Path

    name = "vllm_omni_model_directory"
    root = Path(directory)
    if root.is_symlink() or not root.is_dir():
        return [f"{name} ({directory}) is not a directory on the controller"
                + (" (it is a symbolic link: name the directory itself)" if root.is_symlink() else "")]
    problems: list[str] = []
    config = root / "config.json"
    try:
        loaded = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else None
    except (OSError, ValueError):
        loaded = None
        problems.append(f"{name} ({directory}) holds a config.json that is not readable JSON")
    if loaded is None and not problems:
        problems.append(f"{name} ({directory}) holds no config.json, so it is not a model directory")
    elif loaded is not None and not isinstance(loaded, dict):
        problems.append(f"{name} ({directory}) holds a config.json that is not a JSON object")
    weights, count, outside = False, 0, []
    real_root = os.path.realpath(root)
    for current, dirs, files in os.walk(root, followlinks=False):
        for entry in dirs + files:
            count += 1
            path = os.path.join(current, entry)
            if entry.endswith(MODEL_WEIGHTS) or entry.endswith(".safetensors.index.json"):
                weights = True
            if os.path.islink(path):
                target = os.path.realpath(path)
                inside_root = target == real_root or target.startswith(real_root + os.sep)
                in_hf_cache = re.search(r"/models--[^/]+/blobs/[^/]+$", target) is not None
                if not (inside_root or in_hf_cache):
                    outside.append(os.path.relpath(path, root))
        if count > MODEL_DIR_MAX_FILES:
            problems.append(f"{name} ({directory}) holds more than {MODEL_DIR_MAX_FILES} files: not a model directory")
            return problems
    if weights_needed and not weights:
        problems.append(f"{name} ({directory}) holds no weights (*.safetensors, *.bin, ...)")
    if outside:
        problems.append(f"{name} ({directory}) holds links out of it ({', '.join(sorted(outside)[:3])}"
                        f"{' ...' if len(outside) > 3 else ''}): every file is sent to every engine host, so a link "
                        "may point only inside the directory or into a Hugging Face cache's blobs")
    return problems
