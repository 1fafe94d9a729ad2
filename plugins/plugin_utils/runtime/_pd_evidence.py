# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Did one request really go prefill -> KV transfer -> decode? Judged from a pipeline's log.

A PD pipeline can answer with text while the split is broken: that is why deploy's smoke test
and upgrade's verify send each PD pipeline a request with a known ``request_id`` and then read
the lines the collection's KV connector (``roles/engine/files/engine_plugin/vllm_omni_serve_kv.py``) logs:
the prefill stage hands the request's KV off, the decode stage receives it. vLLM-Omni names the
transfer ``xfer-chatcmpl-<request_id>-<8 random characters>`` (its ``_get_unique_request_id``), so
the request id the client chose appears in both lines.
"""

from __future__ import annotations

import re

# Kept equal to the connector's constants (a unit test compares them with that file).
PD_EVENT = "vllm_omni.serve PD"
PREFILL_HANDED_OFF = f"{PD_EVENT} prefill handed off"
DECODE_RECEIVED = f"{PD_EVENT} decode received KV"
# The connector logs single requests at INFO only when their id carries this (DEBUG otherwise).
CHECK_REQUEST_PREFIX = "vllm-omni-serve-check"
# What a broken split prints instead (vLLM-Omni's orchestrator, then the API server).
FAILURES = ("Missing prefill kv_transfer_params.remote_request_id", "EngineDeadError")
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{7,100}")


def transfer_id_prefix(request_id: str) -> str:
    """The start of the transfer id vLLM-Omni gives a chat completion sent with ``request_id``."""
    return f"transfer_id=xfer-chatcmpl-{request_id}-"


def judge(log_text: str, request_id: str) -> dict:
    """{"ok", "prefill", "decode", "failures", "reason"} for the request sent with ``request_id``."""
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id) \
            or not request_id.startswith(CHECK_REQUEST_PREFIX):
        raise ValueError(f"request_id {request_id!r} must start with {CHECK_REQUEST_PREFIX} (the connector logs only "
                         "those at INFO) and be 8-101 letters, digits, '.', '_', '-'")
    prefix = transfer_id_prefix(request_id)
    lines = log_text.splitlines()
    prefill = [line for line in lines if PREFILL_HANDED_OFF in line and prefix in line]
    decode = [line for line in lines if DECODE_RECEIVED in line and prefix in line]
    failures = [line.strip()[:300] for line in lines if any(mark in line for mark in FAILURES)]
    ok = bool(prefill and decode and not failures)
    if ok:
        reason = "prefill handed the KV off and decode received it"
    elif failures:
        reason = "the engine reported a broken prefill/decode split: " + failures[0]
    elif not prefill:
        reason = (f"no '{PREFILL_HANDED_OFF}' line for request {request_id}: the request did not go through the "
                  "prefill stage with the collection's KV connector")
    else:
        reason = (f"the prefill stage handed request {request_id} off, but no '{DECODE_RECEIVED}' line shows the "
                  "decode stage receiving its KV")
    return {"ok": ok, "prefill": prefill[:3], "decode": decode[:3], "failures": failures[:3], "reason": reason}
