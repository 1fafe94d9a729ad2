"""The collection's engine plugin driven through vLLM-Omni's own code on CPU (run by test_engine_plugin.py).

Runs in an engine venv where the plugin may or may not be installed. Usage::

    <venv>/bin/python engine_plugin_probe.py MODEL_DIR CONFIG_FLAG PD_STAGE_CONFIG AGGREGATED_STAGE_CONFIG

and prints one line ``@@engine_plugin_probe@@{json}``: what ``describe()`` says, whether vLLM's own general-plugin
loader finds and runs the plugin, which engine functions it patched, and, where the sampling fix is in force, the
sampling parameters each stage would get for a set of chat requests, with the fix and without it
(the engine's original function, kept by the patch as ``__wrapped__``):

the request goes through ``OmniOpenAIServingChat._build_sampling_params_list_from_request`` over the stage configs
and stage defaults the engine resolves from the rendered file; prefill's entry then through the engine's
``_prepare_prefill_sampling_params`` and decode's through ``Orchestrator._build_pd_decode_params``, which make what
each PD stage receives.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ["HF_HUB_OFFLINE"] = "1"
MARKER = "@@engine_plugin_probe@@"
CHECKER_DIR = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "seed", "ignore_eos",
          "min_tokens", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "n")
CHAT_CASES = {
    "every_field": {"max_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 1234,
                    "stop": ["END"], "stop_token_ids": [151643], "presence_penalty": 0.5, "frequency_penalty": 0.25,
                    "repetition_penalty": 1.1, "logit_bias": {"42": 5.0, "7": -200}, "min_tokens": 2,
                    "ignore_eos": True},
    "max_completion_tokens": {"max_completion_tokens": 9, "stop": "STOP"},
    "nothing_set": {},
    "two_choices": {"n": 2},
    "temperature_out_of_range": {"temperature": 3.5},
    "logit_bias_not_a_token": {"logit_bias": {"hello": 1.0}},
}


def summary(params) -> dict:
    values = {name: getattr(params, name, None) for name in FIELDS}
    values["logit_bias"] = {str(k): v for k, v in (values["logit_bias"] or {}).items()} or None
    kv = (getattr(params, "extra_args", None) or {}).get("kv_transfer_params") or {}
    values["kv_transfer_params"] = sorted(kv)
    return values


def stage_defaults(stages, legacy: bool) -> list:
    """Each stage's default SamplingParams, as the engine makes them (legacy stage objects or 0.28+ typed ones)."""
    from vllm_omni.engine import stage_init_utils

    if legacy:
        return [stage_init_utils.extract_legacy_stage_metadata(stage).default_sampling_params for stage in stages]
    return [stage_init_utils.extract_stage_metadata_from_omni_stage_config(stage).default_sampling_params
            for stage in stages]


def engine_client(model_dir: str, config: str, config_flag: str) -> SimpleNamespace:
    sys.path.insert(0, str(CHECKER_DIR))
    import _engine_check

    stages, legacy = _engine_check._resolve(model_dir, config, config_flag)
    return SimpleNamespace(stage_configs=stages, default_sampling_params_list=stage_defaults(stages, legacy))


def pd_attributes(client: SimpleNamespace) -> list[dict]:
    """What the engine's PD code reads off each stage object (``getattr`` with its own defaults)."""
    return [{"is_prefill_only": getattr(stage, "is_prefill_only", False),
             "is_decode_only": getattr(stage, "is_decode_only", False),
             "has_engine_args": hasattr(stage, "engine_args"),
             "engine_input_source": list(getattr(stage, "engine_input_source", []) or [])}
            for stage in client.stage_configs]


def chat_cases(client: SimpleNamespace, pd: bool) -> dict:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm_omni.engine.orchestrator import Orchestrator
    from vllm_omni.entrypoints.openai.serving_chat import OmniOpenAIServingChat
    from vllm_omni.entrypoints.pd_utils import PDDisaggregationMixin

    # What the client gets as HTTP 400: a ValueError, which the chat server's own handler answers with
    # create_error_response. Anything else raised there is HTTP 500: vLLM-Omni 0.30's route catches every other
    # exception itself (its vLLM's VLLMValidationError too, no ValueError: temperature 3 got a 500 on an H100, run 17).
    serving = object.__new__(OmniOpenAIServingChat)
    serving.engine_client = client
    patched = OmniOpenAIServingChat._build_sampling_params_list_from_request
    original = getattr(patched, "__wrapped__", patched)
    pair = PDDisaggregationMixin.detect_pd_separation_from_stage_configs(list(client.stage_configs))
    mixin = object.__new__(PDDisaggregationMixin)
    cases = {"pd_pair": list(pair) if pair else None}
    for name, fields in CHAT_CASES.items():
        request = ChatCompletionRequest(messages=[{"role": "user", "content": "hello"}], **fields)
        case = {}
        for label, build in (("with_fix", patched), ("without_fix", original)):
            try:
                params = build(serving, request)
            except ValueError as error:
                case[label] = {"refused": str(error)}
                continue
            except Exception as error:  # the route's HTTP 500
                case[label] = {"server_error": f"{type(error).__name__}: {error}"}
                continue
            stages = [summary(p) for p in params]
            case[label] = {"stages": stages}
            if pair:
                request_id = f"probe-{name}"
                orchestrator = SimpleNamespace(_pd_kv_params={request_id: {"remote_request_id": request_id}},
                                               _pd_bootstrap_addr="10.0.0.11:8998", _pd_prefill_engine_id="probe")
                try:
                    prefill = mixin._prepare_prefill_sampling_params(request_id, params[pair[0]])
                    decode = Orchestrator._build_pd_decode_params(orchestrator, request_id, params[pair[1]])
                except Exception as error:  # past the chat server: the client would see a server error
                    case[label]["engine_error"] = f"{type(error).__name__}: {error}"
                    continue
                case[label].update(prefill_receives=summary(prefill), decode_receives=summary(decode))
        cases[name] = case
    return cases


def main() -> int:
    model_dir, config_flag, pd_config, aggregated_config = sys.argv[1:5]
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # the engine logs to stdout
    result: dict = {}
    try:
        import vllm_omni_serve_fixes as fixes
    except ImportError:
        result["installed"] = False
    else:
        from vllm.plugins import load_general_plugins, load_plugins_by_group

        result["installed"] = True
        result["describe"] = fixes.describe()
        result["discovered_by_vllm"] = sorted(load_plugins_by_group("vllm.general_plugins"))
        load_general_plugins()
        from vllm_omni.entrypoints.openai import serving_chat

        result["patched"] = {
            "chat": getattr(serving_chat.OmniOpenAIServingChat._build_sampling_params_list_from_request,
                            fixes.PATCHED, None)}
        if "request_sampling_reaches_answer_stage" in result["describe"].get("fixes_in_force", []):
            pd = engine_client(model_dir, pd_config, config_flag)
            aggregated = engine_client(model_dir, aggregated_config, config_flag)
            result["pd_chat"] = chat_cases(pd, pd=True)
            result["aggregated_chat"] = chat_cases(aggregated, pd=False)
            result["stage_attributes"] = {"pd": pd_attributes(pd), "aggregated": pd_attributes(aggregated)}
    sys.stdout = real_stdout
    print(MARKER + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
