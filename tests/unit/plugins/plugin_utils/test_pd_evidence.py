"""The judge of deploy's PD smoke check, and its agreement with the connector that logs the lines."""

from __future__ import annotations

import ast

import pytest
from testlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _pd_evidence

RID = "vllm-omni-serve-check-20261201-omni0"
PREFILL = (f"INFO 12-01 [vllm_omni_serve_kv.py:118] vllm_omni.serve PD prefill handed off "
           f"transfer_id=xfer-chatcmpl-{RID}-1a2b3c4d prefill_request_id=chatcmpl-{RID}-1a2b3c4d-9f blocks=1 "
           "status=FINISHED_LENGTH_CAPPED")
DECODE = (f"INFO 12-01 [vllm_omni_serve_kv.py:133] vllm_omni.serve PD decode received KV "
          f"transfer_id=xfer-chatcmpl-{RID}-1a2b3c4d decode_request_id=chatcmpl-{RID}-1a2b3c4d-77 tokens=12")


def test_both_lines_for_this_request_pass():
    verdict = _pd_evidence.judge("noise\n" + PREFILL + "\n" + DECODE + "\n", RID)
    assert verdict["ok"] and verdict["prefill"] == [PREFILL] and verdict["decode"] == [DECODE]


def test_a_missing_decode_line_fails_and_says_which_side():
    verdict = _pd_evidence.judge(PREFILL, RID)
    assert not verdict["ok"] and "no 'vllm_omni.serve PD decode received KV' line" in verdict["reason"]


def test_lines_of_another_request_do_not_count():
    other = PREFILL.replace(RID, RID + "x") + "\n" + DECODE.replace(RID, RID + "x")
    verdict = _pd_evidence.judge(other, RID)
    assert not verdict["ok"] and "did not go through the prefill stage" in verdict["reason"]


def test_the_engines_failure_lines_fail_it_even_with_both_lines():
    dead = "RuntimeError: [Orchestrator][PD] Missing prefill kv_transfer_params.remote_request_id for req=x"
    verdict = _pd_evidence.judge("\n".join([PREFILL, DECODE, dead]), RID)
    assert not verdict["ok"] and "broken prefill/decode split" in verdict["reason"]


@pytest.mark.parametrize("bad", ["", "short", "user-request-0001", "vllm-omni-serve-check bad", 7])
def test_request_ids_the_connector_would_not_log_at_info_are_refused(bad):
    with pytest.raises(ValueError, match="must start with vllm-omni-serve-check"):
        _pd_evidence.judge("", bad)


def test_constants_are_the_connectors_own():
    """The connector runs in the engine venv, so it cannot import these: the values must match its file."""
    tree = ast.parse((REPO / "roles" / "engine" / "files" / "engine_plugin" / "vllm_omni_serve_kv.py").read_text())
    assigned = {node.targets[0].id: node.value for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    assert ast.literal_eval(assigned["PD_EVENT"]) == _pd_evidence.PD_EVENT
    assert ast.literal_eval(assigned["CHECK_REQUEST_PREFIX"]) == _pd_evidence.CHECK_REQUEST_PREFIX
    for name, suffix in (("PREFILL_HANDED_OFF", " prefill handed off"), ("DECODE_RECEIVED", " decode received KV")):
        assert ast.unparse(assigned[name]) == f"f'{{PD_EVENT}}{suffix}'"
        assert getattr(_pd_evidence, name) == _pd_evidence.PD_EVENT + suffix
