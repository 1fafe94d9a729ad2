"""The collection's engine plugin in each version's engine venv, driven through vLLM-Omni's own code on CPU.

vLLM-Omni 0.26 applies a chat request's sampling fields to prefill only in a PD pipeline (decode wrote 2,048
tokens where 32 were asked, on an H200).
``engine_plugin_probe.py`` loads the plugin through vLLM's own general-plugin loader and sends requests through
the engine's chat server, its prefill preparation and its orchestrator's decode parameters, with the fix and
without it (the engine's original function), and reads the PD markers each stage object shows (on 0.30 the plugin's
registered PD pipeline puts them there). That nothing is armed under a version pair a fix was not proven on is a
unit test (tests/unit/roles/test_engine_plugin_guard.py): every supported version carries the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import OUTPUT, REPO, model_dir

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import (
    ANSWER_STAGE_SAMPLING_FIX,
    support_table,
    supported_versions,
)

PROBE = REPO / "tests" / "conformance" / "engine_plugin_probe.py"
# Per version: a rendered PD and aggregated pipeline of that version's schema.
CONFIGS = {
    "0.26.0": ("pd-text-4gpu", "aggregated-026"),
    "0.30.0": ("pd-030-nixl-text-4gpu", "aggregated-030"),
}


def rendered(case: str):
    return REPO / "tests" / "golden" / case / "expected" / "gpu-1" / "omni0" / "stage_config.yaml"


EVERY_FIELD = {"max_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 1234,
               "stop": ["END"], "stop_token_ids": [151643], "presence_penalty": 0.5, "frequency_penalty": 0.25,
               "repetition_penalty": 1.1, "logit_bias": {"42": 5.0, "7": -100.0}, "min_tokens": 2,
               "ignore_eos": True, "n": 1}


CARRIED = [v for v in supported_versions() if support_table()[v].engine_plugin]


def run_probe(version: str, engines) -> dict:
    venv, home = engines[version]
    env = dict(os.environ)
    pd_case, aggregated_case = CONFIGS.get(version, CONFIGS["0.26.0"])
    result = subprocess.run([str(venv / "bin" / "python"), str(PROBE), str(model_dir(home)),
                             support_table()[version].config_flag, str(rendered(pd_case)), str(rendered(aggregated_case))],
                            capture_output=True, text=True, timeout=600, check=False, env=env)
    log = OUTPUT / version / "engine_plugin_probe.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("@@engine_plugin_probe@@")]
    assert result.returncode == 0 and lines, f"the probe failed (rc={result.returncode}); see {log}"
    return json.loads(lines[-1].removeprefix("@@engine_plugin_probe@@"))


@pytest.fixture(scope="module", params=CARRIED)
def probe(request, engines):
    return request.param, run_probe(request.param, engines)


@pytest.fixture(autouse=True)
def _record(request):
    for name in ("probe",):
        if name in request.fixturenames:
            version = request.getfixturevalue(name)[0]
            case = request.node.name.replace(f"[{version}]", "").replace(f"{version}-", "")
            request.node.conformance_case = (version, f"engine plugin: {case}")


def test_vllm_loads_the_plugin_and_it_is_whole(probe):
    version, result = probe
    assert result["installed"] is True
    assert "vllm_omni_serve" in result["discovered_by_vllm"]
    assert result["describe"]["problems"] == []
    assert result["describe"]["revision"] == support_table()[version].engine_plugin["revision"]
    assert sorted(result["describe"]["fixes_in_force"]) == sorted(support_table()[version].engine_plugin["fixes"])
    assert result["patched"] == {"chat": ANSWER_STAGE_SAMPLING_FIX}


def test_without_the_fix_decode_ignores_the_client(probe):
    """The engine's behaviour the fix exists for; when this fails, upstream changed it: re-check the need."""
    _unused, result = probe
    stock = result["pd_chat"]["every_field"]["without_fix"]["decode_receives"]
    assert stock["max_tokens"] == 2048 and stock["temperature"] == 0.0 and stock["seed"] is None


def test_decode_receives_every_sampling_field_of_a_chat_request(probe):
    _unused, result = probe
    chat = result["pd_chat"]
    assert chat["pd_pair"] == [0, 1]
    fixed = chat["every_field"]["with_fix"]
    decode = fixed["decode_receives"]
    assert {name: decode[name] for name in EVERY_FIELD} == EVERY_FIELD
    # What makes it a PD decode: the engine's own KV parameters, laid over the client's sampling.
    assert {"do_remote_prefill", "remote_request_id", "transfer_id"} <= set(decode["kv_transfer_params"])
    # Prefill keeps what the engine gives it: one token, no stop strings, handing its KV off.
    assert fixed["prefill_receives"]["max_tokens"] == 1 and fixed["prefill_receives"]["stop"] == []
    assert "do_remote_decode" in fixed["prefill_receives"]["kv_transfer_params"]


def test_max_completion_tokens_and_a_single_stop_string(probe):
    _unused, result = probe
    decode = result["pd_chat"]["max_completion_tokens"]["with_fix"]["decode_receives"]
    assert decode["max_tokens"] == 9 and decode["stop"] == ["STOP"]


def test_a_request_that_sets_nothing_keeps_the_decode_defaults(probe):
    _unused, result = probe
    case = result["pd_chat"]["nothing_set"]
    assert case["with_fix"]["decode_receives"] == case["without_fix"]["decode_receives"]
    assert case["with_fix"]["decode_receives"]["max_tokens"] == 2048  # the rendered decode default


@pytest.mark.parametrize("case, words", [("two_choices", "n=2: this vLLM-Omni pipeline returns one choice"),
                                         ("temperature_out_of_range", "temperature must be in [0, 2]"),
                                         ("logit_bias_not_a_token", "logit_bias contains key(s)")])
def test_what_decode_cannot_honour_is_the_clients_400(probe, case, words):
    """A ValueError from the chat server's sampling step is its HTTP 400 (``create_error_response``); any other
    exception there is the route's HTTP 500 (what 0.30's VLLMValidationError was before plugin revision 3)."""
    _unused, result = probe
    assert "server_error" not in result["pd_chat"][case]["with_fix"], result["pd_chat"][case]["with_fix"]
    assert words in result["pd_chat"][case]["with_fix"]["refused"]


def test_aggregated_comprehension_stage_gets_the_fields_the_engine_left_out(probe):
    _unused, result = probe
    case = result["aggregated_chat"]["every_field"]
    assert case["with_fix"]["stages"][0] == {**case["with_fix"]["stages"][0], **EVERY_FIELD}
    left_out = case["without_fix"]["stages"][0]
    assert (left_out["min_p"], left_out["repetition_penalty"], left_out["logit_bias"]) == (0.0, 1.0, None)


def test_pd_stages_carry_the_markers_and_other_stages_are_as_the_engine_made_them(probe):
    """On 0.28+ the PD markers come from the plugin's registered pipeline (qwen3_omni_pd_pipelines); on 0.26 from
    the rendered stage_args. Stages of the engine's own (aggregated) pipeline show nothing new."""
    version, result = probe
    pd, aggregated = result["stage_attributes"]["pd"], result["stage_attributes"]["aggregated"]
    assert [(s["is_prefill_only"], s["is_decode_only"]) for s in pd[:2]] == [(True, False), (False, True)]
    assert pd[1]["engine_input_source"] == [0] and pd[0]["has_engine_args"] and pd[1]["has_engine_args"]
    assert not any(s["is_prefill_only"] or s["is_decode_only"] for s in aggregated)
    if support_table()[version].schema == "stages":
        assert not any(s["has_engine_args"] or s["engine_input_source"] for s in aggregated)
