# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Check a stage config with the installed engine itself (no GPU needed). Stdlib-only at import.

This file is two things:

* a module_utils file the ``config_check`` module imports on the managed host, to get ``SOURCE``
  and the request/answer helpers;
* a program run by an engine venv's Python (``<venv>/bin/python -c SOURCE`` on hosts,
  ``<venv>/bin/python _engine_check.py`` in the conformance suite): it reads requests as JSON on
  stdin and prints one answer line prefixed with ``MARKER``.

Per request it does what the engine does with the file before any device is touched:

1. loads the stage config the way ``vllm serve --omni`` does for the flag in use
   (``load_and_resolve_stage_configs``, legacy or deploy resolver, whichever the version has),
   and reports every stage's id, model stage, devices, tensor-parallel size and inputs; runs the
   engine's per-stage metadata extraction on legacy files (final_output keys, sampling
   defaults, input processors); for a prefill/decode file it runs the engine's own PD detection and validation
   (``PDDisaggregationMixin``) and reports the pair and both bootstrap addresses, and loads each
   PD stage's KV connector class the way vLLM's ``KVConnectorFactory`` does (a CPU boot stops
   before any connector exists);
2. imports every dotted path the file and the resolved stages name (schedulers, input
   processors): stage processes import them only when they start on a GPU, so a CPU boot
   would never notice a path that does not exist;
3. finds the collection's engine plugin the way vLLM finds its general plugins (under the pipeline's
   environment), checks its files against their RECORD and names the fixes in force under this engine;
   a fix the plan expects (``expected_fixes``) that is not in force fails the check.

A model directory with only a generated ``config.json`` (``transformers.Qwen3OmniMoeConfig``)
is enough: resolution needs the model type, not weights.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

MARKER = "@@vllm_omni_config_check@@"
DOTTED = re.compile(r"(vllm_omni|vllm)(\.[A-Za-z_][A-Za-z0-9_]*)+")
QWEN3_OMNI_ARCHITECTURE = "Qwen3OmniMoeForConditionalGeneration"


def make_model_dir(path: str) -> str:
    """A model directory holding only the default Qwen3-Omni config.json (needs transformers)."""
    from transformers import Qwen3OmniMoeConfig

    os.makedirs(path, exist_ok=True)
    config = Qwen3OmniMoeConfig()
    config.architectures = [QWEN3_OMNI_ARCHITECTURE]
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config.to_dict(), handle, indent=1, sort_keys=True)
    return path


def _dotted_strings(value, found: set) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _dotted_strings(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _dotted_strings(item, found)
    elif isinstance(value, str) and DOTTED.fullmatch(value):
        found.add(value)


def _import(path: str):
    import importlib

    module_name, _sep, attribute = path.rpartition(".")
    module = importlib.import_module(module_name)
    if not hasattr(module, attribute):
        raise AttributeError(f"module {module_name} has no attribute {attribute}")
    return getattr(module, attribute)


def _resolve(model_dir: str, config_path: str, config_flag: str):
    """(resolved stage objects, legacy_shape) the way `vllm serve --omni <flag> <path>` resolves them."""
    import inspect

    try:
        from vllm_omni.entrypoints.utils import load_and_resolve_stage_configs as legacy_resolver
    except ImportError:
        legacy_resolver = None
    if legacy_resolver is not None and "stage_configs_path" in inspect.signature(legacy_resolver).parameters:
        kwargs = {"trust_remote_code": True}
        if config_flag == "--stage-configs-path":
            result = legacy_resolver(model_dir, config_path, {}, **kwargs)
        else:
            result = legacy_resolver(model_dir, None, {}, deploy_config_path=config_path, **kwargs)
        return list(result[1]), True
    if config_flag != "--deploy-config":
        raise ValueError(f"this vLLM-Omni has no {config_flag}; it loads configs with --deploy-config only")
    from vllm.plugins import load_general_plugins
    from vllm_omni.engine.omni_engine_base import load_and_resolve_stage_configs

    # As `vllm serve` does before it resolves anything: a deploy config may name a pipeline a general plugin
    # registers (the collection's PD pipelines on 0.28+).
    load_general_plugins()

    resolution = load_and_resolve_stage_configs(model_dir, {}, trust_remote_code=True, deploy_config_path=config_path,
                                                stage_overrides=None, strategy_config_path=None)
    return list(resolution.stage_configs), False


def _stage_facts(stage, legacy: bool) -> dict:
    if legacy:
        from omegaconf import OmegaConf

        data = OmegaConf.to_container(stage, resolve=True)
        engine_args = data.get("engine_args") or {}
        return {
            "id": data.get("stage_id"),
            "model_stage": engine_args.get("model_stage"),
            "devices": str((data.get("runtime") or {}).get("devices")),
            "tensor_parallel_size": engine_args.get("tensor_parallel_size", 1),
            "inputs": list(data.get("engine_input_source") or []),
        }, data
    facts = {
        "id": stage.stage_id,
        "model_stage": stage.model_stage,
        "devices": str(stage.runtime_config.devices),
        "tensor_parallel_size": getattr(stage.parallel_config, "tensor_parallel_size", 1),
        "inputs": list(stage.input_sources or []),
    }
    named = {name: getattr(stage, name, None) for name in (
        "scheduler_cls", "custom_process_input_func", "custom_process_next_stage_input_func",
        "_resolved_custom_process_input_func", "_resolved_custom_process_next_stage_input_func",
        "cfg_kv_collect_func", "prompt_expand_func", "prompt_transform_func")}
    return facts, named


def _legacy_metadata(stages: list, answer: dict) -> None:
    """The engine's own per-stage metadata extraction (where 'Missing key final_output_type' comes from)."""
    try:
        from vllm_omni.engine.stage_init_utils import extract_legacy_stage_metadata
    except ImportError:
        return
    for stage in stages:
        try:
            extract_legacy_stage_metadata(stage)
        except Exception as error:
            answer["problems"].append(f"stage {getattr(stage, 'stage_id', '?')}: the engine's stage set-up refused it: "
                                      f"{type(error).__name__}: {error}")


def _pd_facts(stages: list, legacy: bool, answer: dict) -> None:
    from vllm_omni.entrypoints.pd_utils import PDDisaggregationMixin

    probe = type("ConfigCheckProbe", (PDDisaggregationMixin,), {})()
    probe.stage_configs = stages
    probe._name = "config_check"
    try:
        probe._init_pd_state()  # detection + the engine's own _validate_pd_separation_config
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        answer["problems"].append(f"the engine's prefill/decode validation refused the file: {error}")
        return
    pair = getattr(probe, "_pd_separation_pair", None)
    answer["pd_pair"] = list(pair) if pair else None
    if not pair:
        return
    info = getattr(probe, "_pd_connector_info", None) or {}
    answer["pd_bootstrap_addr"] = info.get("prefill_bootstrap_addr")
    # The address the orchestrator actually hands decode (AsyncOmniEngine._detect_pd_config).
    import vllm.envs as vllm_envs

    prefill = stages[pair[0]]
    kv = getattr(getattr(prefill, "engine_args", None), "kv_transfer_config", None)
    kv_ip = (getattr(kv, "kv_ip", None) if kv is not None else None) or "127.0.0.1"
    answer["runtime_bootstrap_addr"] = f"http://{kv_ip}:{vllm_envs.VLLM_MOONCAKE_BOOTSTRAP_PORT}"
    _kv_connectors(stages, legacy, pair, answer)


def _kv_connectors(stages: list, legacy: bool, pair, answer: dict) -> None:
    """The connector class each PD stage's engine would create, found the way vLLM finds it.

    A CPU boot stops before any KV connector exists, so this is the only place a connector that
    does not import (or is not installed in this venv) shows before a GPU host starts the stage.
    """
    from omegaconf import OmegaConf
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    found = {}
    for stage_id in pair:
        if legacy:
            kv = OmegaConf.to_container(stages[stage_id], resolve=True)["engine_args"]["kv_transfer_config"]
            config = KVTransferConfig(**kv)
        else:  # a typed stage (0.28+) holds the engine's own KVTransferConfig
            config = stages[stage_id].connector_config.kv_transfer_config
            kv = {"kv_connector": config.kv_connector, "kv_connector_module_path": config.kv_connector_module_path}
        try:
            cls = KVConnectorFactory.get_connector_class(config)
        except Exception as error:
            answer["problems"].append(f"stage {stage_id}: vLLM cannot load kv_connector {kv.get('kv_connector')!r}"
                                      f"{' from ' + kv['kv_connector_module_path'] if kv.get('kv_connector_module_path') else ''}"
                                      f": {type(error).__name__}: {error}")
            continue
        found[str(stage_id)] = f"{cls.__module__}.{cls.__qualname__}"
    answer["kv_connectors"] = found


def _engine_plugin(answer: dict, request: dict) -> None:
    """The collection's engine plugin as this pipeline's engine would load it: vLLM's own discovery of its
    general plugins (``VLLM_PLUGINS`` of the pipeline's environment applies), the plugin's RECORD, and the fixes
    in force under the installed engine; a fix the plan expects that is not in force is a problem."""
    expected = request.get("expected_fixes") or []
    try:
        import vllm_omni_serve_fixes
    except ImportError:
        answer["engine_plugin"] = None
        if expected:
            answer["problems"].append("the collection's engine plugin is not installed in this venv (fixes expected: "
                                      f"{', '.join(expected)})")
        return
    from vllm.plugins import load_plugins_by_group

    found = vllm_omni_serve_fixes.describe()
    found["loaded_by_vllm"] = "vllm_omni_serve" in load_plugins_by_group("vllm.general_plugins")
    answer["engine_plugin"] = found
    if not expected:
        return
    answer["problems"].extend(f"engine plugin: {problem}" for problem in found.get("problems", []))
    if not found["loaded_by_vllm"]:
        answer["problems"].append("vLLM does not load the collection's engine plugin (vllm.general_plugins) here")
    missing = [fix for fix in expected if fix not in found.get("fixes_in_force", [])]
    if missing:
        answer["problems"].append(f"engine plugin revision {found.get('revision')}: {', '.join(missing)} not in force "
                                  f"under vLLM-Omni {found.get('vllm_omni')} with vLLM {found.get('vllm')}")


def _compare(answer: dict, request: dict) -> None:
    expected = request.get("expected_stages")
    if expected is not None:
        got = answer["stages"]
        if len(got) != len(expected):
            answer["problems"].append(f"the engine resolved {len(got)} stages, the plan has {len(expected)}")
        for want, have in zip(expected, got, strict=False):  # a count mismatch is reported above
            for key, value in want.items():
                if have.get(key) != value:
                    answer["problems"].append(f"stage {want.get('id')}: engine resolved {key}={have.get(key)!r}, "
                                              f"the plan says {value!r}")
    if "expected_pd" in request:
        want = request["expected_pd"] or {}
        if want.get("pair") is None and answer.get("pd_pair"):
            answer["problems"].append(f"the engine detected a prefill/decode pair {answer['pd_pair']} the plan has not")
        if want.get("pair") is not None:
            if answer.get("pd_pair") != want["pair"]:
                answer["problems"].append(f"the engine detected PD pair {answer.get('pd_pair')}, the plan says {want['pair']}")
            if answer.get("pd_bootstrap_addr") != want["bootstrap"]:
                answer["problems"].append(f"PD bootstrap address {answer.get('pd_bootstrap_addr')!r} != "
                                          f"{want['bootstrap']!r} (kv_ip:mooncake_bootstrap_port)")
            # Only the process running the orchestrator (a single-process pipeline, a distributed one's head)
            # hands decode an address; a headless stage's environment need not name one.
            if want.get("orchestrator", True) and want["bootstrap"] is not None \
                    and answer.get("runtime_bootstrap_addr") != f"http://{want['bootstrap']}":
                answer["problems"].append(f"the orchestrator would hand decode {answer.get('runtime_bootstrap_addr')!r}, "
                                          f"not http://{want['bootstrap']} (VLLM_MOONCAKE_BOOTSTRAP_PORT mismatch?)")
            for stage_id, loaded in (answer.get("kv_connectors") or {}).items():
                if want.get("kv_connector") and loaded != want["kv_connector"]:
                    answer["problems"].append(f"stage {stage_id}: vLLM would create {loaded}, the plan says "
                                              f"{want['kv_connector']}")


def check(request: dict) -> dict:
    """One request: {config, config_flag, model_dir?, environment?, expected_stages?, expected_pd?, expected_fixes?}."""
    answer = {"config": request["config"], "problems": [], "stages": [], "imported": []}
    try:
        import yaml

        with open(request["config"], encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        stages, legacy = _resolve(request["model_dir"], request["config"], request["config_flag"])
    except Exception as error:  # the engine's own refusal is the answer
        answer["problems"].append(f"the engine could not load the stage config: {type(error).__name__}: {error}")
        return answer
    dotted: set = set()
    _dotted_strings(document, dotted)
    for stage in stages:
        facts, named = _stage_facts(stage, legacy)
        answer["stages"].append(facts)
        _dotted_strings(named, dotted)
    for path in sorted(dotted):
        try:
            _import(path)
            answer["imported"].append(path)
        except Exception as error:
            answer["problems"].append(f"{path} cannot be imported: {type(error).__name__}: {error}")
    if legacy:
        _legacy_metadata(stages, answer)
    _pd_facts(stages, legacy, answer)
    _engine_plugin(answer, request)
    _compare(answer, request)
    return answer


def main() -> int:
    requests = json.loads(sys.stdin.read())
    single = isinstance(requests, dict)
    os.environ["HF_HUB_OFFLINE"] = "1"  # a config check never downloads anything
    baseline = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="vllm-omni-check-") as scratch:
        real_stdout = sys.stdout
        sys.stdout = sys.stderr  # the engine logs to stdout; keep our answer line alone there
        try:
            answers = []
            for request in [requests] if single else requests:
                if not request.get("model_dir"):
                    request["model_dir"] = os.path.join(scratch, "model")
                    if not os.path.isdir(request["model_dir"]):
                        make_model_dir(request["model_dir"])
                # vllm.envs reads the environment when asked: the pipeline's must be in place first.
                os.environ.clear()
                os.environ.update(baseline)
                os.environ.update({k: str(v) for k, v in (request.get("environment") or {}).items()})
                os.environ["HF_HUB_OFFLINE"] = "1"
                answers.append(check(request))
        finally:
            sys.stdout = real_stdout
    import vllm
    import vllm_omni

    versions = {"vllm": getattr(vllm, "__version__", None), "vllm_omni": getattr(vllm_omni, "__version__", None)}
    # The answer line on the real stdout (module code would use exit_json; this runs in the engine venv).
    sys.stdout.write(MARKER + json.dumps({"versions": versions, "answers": answers}) + "\n")
    sys.stdout.flush()
    return 0


def parse_answer(stdout: str) -> dict | None:
    """The answer line of a run of this program, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return None


if __name__ == "__main__":
    raise SystemExit(main())
