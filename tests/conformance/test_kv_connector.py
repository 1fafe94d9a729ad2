"""The collection's KV connectors against vLLM's own Mooncake and NIXL code, in each version's engine venv.

vLLM 0.26.0's MooncakeConnector finishes a prefill without handing ``remote_request_id`` back;
vLLM-Omni's orchestrator then raises and the engine dies at the first PD request (seen on an H200).
vLLM's NixlConnector hands it back, but every engine of a pipeline listens at the one side-channel
port of the pipeline's environment. ``kv_connector_probe.py`` drives vLLM's real
``MooncakeConnectorScheduler`` and ``NixlPullConnectorScheduler`` through the stock classes and ours;
these tests pin down what each returns.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import OUTPUT, REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import support_table, supported_versions
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _pd_evidence

PROBE = REPO / "tests" / "conformance" / "kv_connector_probe.py"
PD_VERSIONS = [v for v in supported_versions() if support_table()[v].kv_connector("mooncake")]


@pytest.fixture(scope="module", params=PD_VERSIONS)
def probe(request, engines):
    version = request.param
    venv, _unused = engines[version]
    result = subprocess.run([str(venv / "bin" / "python"), str(PROBE)], capture_output=True, text=True, timeout=600,
                            check=False, env={**os.environ, "VLLM_MOONCAKE_BOOTSTRAP_PORT": "9123"})
    log = OUTPUT / version / "kv_connector_probe.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("@@kv_connector_probe@@")]
    assert result.returncode == 0 and lines, f"the probe failed (rc={result.returncode}); see {log}"
    return version, json.loads(lines[-1].removeprefix("@@kv_connector_probe@@"))


@pytest.fixture(autouse=True)
def _record(request, probe):
    request.node.conformance_case = (probe[0], f"kv connector: {request.node.name}")


def test_vllm_loads_our_class_from_the_rendered_names(probe):
    version, result = probe
    connector = support_table()[version].kv_connector("mooncake")
    assert result["factory_class"] == f"{connector['module']}.{connector['class']}"
    assert result["is_mooncake_subclass"] is True


def test_stock_connector_hands_nothing_back(probe):
    """The upstream behaviour the module exists for; when this fails, vLLM fixed it: re-check the need."""
    _unused, result = probe
    assert result["cases"]["stock/length_capped"]["returned"] is None
    assert result["cases"]["stock/length_capped"]["delay_free_blocks"] is True


@pytest.mark.parametrize("case", ["length_capped", "two_groups", "eos_first_token"])
def test_completed_prefill_hands_the_request_id_back_and_sends_its_kv(probe, case):
    _unused, result = probe
    ours = result["cases"][f"ours/{case}"]
    # With the prefill engine's own bootstrap address and engine id: the orchestrator lays them over the ones
    # it derives from the head's config, so decode pulls from the prefill engine that ran the request.
    assert ours["returned"] == {"remote_request_id": "chatcmpl-probe-0a1b",
                                "transfer_id": "xfer-chatcmpl-vllm-omni-serve-check-probe-1a2b3c4d",
                                "remote_bootstrap_addr": "http://10.1.2.3:9123", "remote_engine_id": "probe-kv_producer"}
    assert ours["delay_free_blocks"] is True
    groups = 2 if case == "two_groups" else 1
    assert ours["kv_queued_for_send"] == [[10 + g, 20 + g] for g in range(groups)]
    assert ours["not_processed"] == []


def test_eos_first_token_keeps_its_status_and_differs_from_stock(probe):
    _unused, result = probe
    assert result["cases"]["ours/eos_first_token"]["status_after"] == "FINISHED_STOPPED"
    stock = result["cases"]["stock/eos_first_token"]
    assert stock["returned"] is None and stock["not_processed"] == ["xfer-chatcmpl-vllm-omni-serve-check-probe-1a2b3c4d"]


@pytest.mark.parametrize("case", ["aborted", "no_kv_params"])
def test_other_requests_keep_vllms_behaviour(probe, case):
    _unused, result = probe
    assert result["cases"][f"ours/{case}"] == result["cases"][f"stock/{case}"]


def test_hand_off_and_receipt_are_logged_for_the_collections_checks_only(probe):
    _unused, result = probe
    assert len(result["prefill_log"]) == 3
    decode_log = [line for line in result["cases"]["ours/decode_pull"]["log"] if _pd_evidence.PD_EVENT in line]
    assert result["cases"]["ours/decode_pull"]["pending_after"] == 0
    # The smoke test's judge accepts exactly these lines for the probe's request id.
    verdict = _pd_evidence.judge("\n".join(result["prefill_log"][:1] + decode_log), "vllm-omni-serve-check-probe")
    assert verdict["ok"], verdict
    assert result["user_request"]["returned"]["remote_request_id"] == "chatcmpl-probe-0a1b"
    assert result["user_request_log"] == ["vllm_omni.serve PD handed off 1 requests in the last 0 s"]


def test_import_refuses_a_vllm_it_was_not_written_for(probe):
    _unused, result = probe
    assert result["guard"]["rc"] != 0
    assert "is written for vLLM" in result["guard"]["last_line"]


# --- NIXL ---------------------------------------------------------------------------------------------


def test_nixl_loads_our_class_from_the_rendered_names(probe):
    version, result = probe
    connector = support_table()[version].kv_connector("nixl")
    assert result["nixl"]["factory_class"] == f"{connector['module']}.{connector['class']}"
    assert result["nixl"]["is_nixl_subclass"] is True


def test_stock_nixl_puts_both_engines_of_a_pipeline_on_one_side_channel(probe):
    """What the class exists for; when this fails, vLLM reads the port per stage: re-check the need."""
    _unused, result = probe
    stock = result["nixl"]["side_channels"]["stock"]
    assert stock["kv_producer"] == stock["kv_consumer"]
    assert result["nixl"]["side_channels"]["ours"] == {"kv_producer": ["10.1.2.3", 5612],
                                                       "kv_consumer": ["10.1.2.3", 5613]}


@pytest.mark.parametrize("case", ["length_capped", "eos_first_token"])
def test_nixl_prefill_hands_back_its_own_side_channel(probe, case):
    _unused, result = probe
    ours, stock = result["nixl"]["cases"][f"ours/{case}"], result["nixl"]["cases"][f"stock/{case}"]
    assert ours["delay_free_blocks"] is True and ours["returned"]["remote_request_id"] == "chatcmpl-probe-0a1b"
    assert (ours["returned"]["remote_host"], ours["returned"]["remote_port"]) == ("10.1.2.3", 5612)
    # Everything else exactly as vLLM's own class returns it.
    assert {k: v for k, v in ours["returned"].items() if k not in ("remote_host", "remote_port")} == \
        {k: v for k, v in stock["returned"].items() if k not in ("remote_host", "remote_port")}


def test_nixl_aborted_prefill_keeps_vllms_behaviour(probe):
    _unused, result = probe
    assert result["nixl"]["cases"]["ours/aborted"] == result["nixl"]["cases"]["stock/aborted"] == \
        {"delay_free_blocks": False, "returned": None}


def test_nixl_hand_off_and_receipt_are_logged_and_judged(probe):
    _unused, result = probe
    cases = result["nixl"]["cases"]
    assert cases["stock/prefill_log"] == [] and len(cases["ours/prefill_log"]) == 2
    assert cases["ours/decode_pull"]["queued_for_recv"] == cases["stock/decode_pull"]["queued_for_recv"] == [[1, 2, 3]]
    assert cases["ours/decode_pull"]["pending_after"] == 0
    decode_log = [line for line in cases["ours/decode_pull"]["log"] if "decode received KV" in line]
    verdict = _pd_evidence.judge("\n".join(cases["ours/prefill_log"][:1] + decode_log), "vllm-omni-serve-check-probe")
    assert verdict["ok"], verdict
