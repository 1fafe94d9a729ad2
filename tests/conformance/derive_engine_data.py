"""Derive one vLLM-Omni version's Qwen3-Omni facts from the installed engine itself.

Runs INSIDE an engine venv (``vllm==X vllm-omni==X``), never on the controller's Python:

    HF_HUB_OFFLINE=1 <venv>/bin/python tests/conformance/derive_engine_data.py MODEL_DIR > data/engines/X.yaml

What it records, and why (the planner reads this file instead of guessing keys):

* ``bundled_deploy``: the engine's own ``vllm_omni/deploy/qwen3_omni_moe.yaml``, parsed. The
  aggregated layout on ``stages:``-schema versions is this document with our devices and overrides.
* ``legacy_stages``: the engine's own resolution of that file with ``async_chunk: false``, in the
  legacy ``stage_args`` shape (``load_and_resolve_stage_configs`` + ``OmegaConf.to_container``).
  The PD layout on ``stage_args`` versions is built from these stages, so every key the engine
  expects (``final_output_type``, the scheduler class, the input processors, ...) comes from it.
  Only recorded where the resolver still returns legacy-shaped stages (<= 0.26).
* ``importables``: every public dotted path a Qwen3-Omni stage config may name in this version
  (input processors and scheduler classes). The controller-side validator refuses any other path.
* ``serve_flags``: the omni CLI flags this version's ``serve`` declares (read from its source),
  so an argv that names a flag the version does not have is refused before it reaches a host.

The conformance suite re-runs this script and compares with the committed file, so the data can
never silently drift from the engine it describes.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

QWEN3_PROCESSORS = "vllm_omni.model_executor.stage_input_processors.qwen3_omni"
SCHEDULER_MODULES = (
    "vllm_omni.core.sched.omni_ar_scheduler",
    "vllm_omni.core.sched.omni_generation_scheduler",
)


def _public_callables(module_name: str, want_classes: bool) -> list[str]:
    module = importlib.import_module(module_name)
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        if want_classes and inspect.isclass(obj) and name.endswith("Scheduler"):
            names.append(f"{module_name}.{name}")
        if not want_classes and inspect.isfunction(obj):
            names.append(f"{module_name}.{name}")
    return sorted(names)


def _resolve_legacy_stages(model_dir: str, deploy_text: str) -> list[dict] | None:
    """The engine's own stage list for the bundled deploy file with async_chunk off."""
    from omegaconf import OmegaConf

    try:
        from vllm_omni.entrypoints.utils import load_and_resolve_stage_configs
    except ImportError:
        return None
    params = inspect.signature(load_and_resolve_stage_configs).parameters
    if "stage_configs_path" not in params or "deploy_config_path" not in params:
        return None
    text = re.sub(r"(?m)^async_chunk: true$", "async_chunk: false", deploy_text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "qwen3_omni_moe.yaml")
        path.write_text(text)
        result = load_and_resolve_stage_configs(
            model_dir, None, {}, trust_remote_code=True, deploy_config_path=str(path)
        )
    stages = result[1]
    return [OmegaConf.to_container(stage, resolve=True) for stage in stages]


def main() -> int:
    # The engine logs to stdout while importing and resolving; keep our document clean.
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()):
        document = _derive(sys.argv[1])
    real_stdout.write(document)
    return 0


def _derive(model_dir: str) -> str:
    import vllm_omni
    import yaml

    package_dir = Path(vllm_omni.__file__).parent
    deploy_text = (package_dir / "deploy" / "qwen3_omni_moe.yaml").read_text()
    serve_source = (package_dir / "entrypoints" / "cli" / "serve.py").read_text()
    legacy = _resolve_legacy_stages(model_dir, deploy_text)
    importables = _public_callables(QWEN3_PROCESSORS, want_classes=False)
    for module_name in SCHEDULER_MODULES:
        importables += _public_callables(module_name, want_classes=True)
    data = {
        "vllm_omni": importlib.metadata.version("vllm-omni"),
        "vllm": importlib.metadata.version("vllm"),
        "transformers": importlib.metadata.version("transformers"),
        "python": "{}.{}".format(*sys.version_info[:2]),
        "derived_with": {"hf_hub_offline": os.environ.get("HF_HUB_OFFLINE") == "1"},
        "serve_flags": sorted(set(re.findall(r'"(--[a-z0-9][a-z0-9-]*)"', serve_source))),
        "importables": sorted(importables),
        "bundled_deploy": yaml.safe_load(deploy_text),
        "legacy_stages": legacy,
    }
    # JSON first: exact types; the YAML dump of that JSON is what we commit.
    data = json.loads(json.dumps(data))
    header = (
        "# GENERATED by tests/conformance/derive_engine_data.py inside a venv with\n"
        f"# vllm=={data['vllm']} vllm-omni=={data['vllm_omni']}. Do not edit by hand:\n"
        "# `make engine-data` re-derives it and the conformance suite fails when it drifts.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, width=100)


if __name__ == "__main__":
    sys.exit(main())
