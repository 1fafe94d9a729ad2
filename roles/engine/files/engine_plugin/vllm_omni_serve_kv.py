# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""vllm_omni.serve's KV connectors for vLLM-Omni prefill/decode (PD), over Mooncake or NIXL.

Installed into the engine venv by the engine role and named in every PD stage config the
collection renders (``vllm_omni_kv_connector`` picks the class)::

    kv_connector: ServeMooncakeConnector      # or ServeNixlConnector
    kv_connector_module_path: vllm_omni_serve_kv

Why ``ServeMooncakeConnector`` exists (measured on an H200 with vLLM 0.26.0 + vLLM-Omni 0.26.0,
docs/engine-facts.md; vLLM 0.30.0's ``request_finished`` is the same code, and the conformance probe shows the
same results): vLLM's ``MooncakeConnector.request_finished`` returns ``(delay_free_blocks, None)``
for a finished prefill, so no KV parameters reach vLLM-Omni's orchestrator, whose
``_build_pd_decode_params`` raises ``Missing prefill kv_transfer_params.remote_request_id`` and
kills the engine on the first request. The subclass changes three things and nothing else:

1. A prefill that completes hands back ``remote_request_id`` (its own request id) and its
   ``transfer_id``. The decode side keys its pull on ``transfer_id``, which the orchestrator sets
   to the same value, so the id only has to be present. With them, its own bootstrap address
   (``kv_ip`` and ``VLLM_MOONCAKE_BOOTSTRAP_PORT``) and ``engine_id``: the orchestrator derives both
   from the head's config and lays what the prefill hands back over them, so with several prefill
   engines (xPyD, a pipeline across hosts) decode pulls from the one that ran the request. With one
   prefill engine they are the values the orchestrator had anyway.
2. A prefill whose single token was end-of-sequence (``FINISHED_STOPPED``) is sent like a
   length-capped one. vLLM frees its KV instead, yet the orchestrator still routes the request to
   decode, which would then wait ``VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT`` (480 s) for KV that never
   comes. The prompt's KV is complete either way; decode samples its own first token.
   Aborted, ignored and failed prefills keep vLLM's behaviour (nothing is sent).
3. Evidence that the split works (below).

Why ``ServeNixlConnector`` exists: vLLM's ``NixlConnector`` already hands ``remote_request_id`` (and its
side channel's host and port) back, and sends prefills that stopped at end-of-sequence. But every
engine takes its handshake port from ``VLLM_NIXL_SIDE_CHANNEL_PORT``, read in the engine's process, and
vLLM-Omni starts every stage process of a pipeline from one API server with one environment: prefill
and decode would bind the same port, and the second engine fails to start. The subclass listens at the
stage's own ``kv_ip`` and ``kv_connector_extra_config.side_channel_port`` (the plan gives each engine its
own) instead, and adds the same evidence. Nothing else changes.

Evidence that the split works, in the engine's log (``PD_EVENT`` lines), from both classes: for
requests the collection's own checks send (request ids starting with ``CHECK_REQUEST_PREFIX``), one INFO
line per hand-off on the prefill side and per received KV on the decode side, with the transfer id:
deploy's smoke test and upgrade's verify read them to prove the request went prefill -> KV transfer ->
decode. Other requests are logged at DEBUG, and each stage adds an INFO count of its hand-offs at most
once every ``SUMMARY_SECONDS``, so production logs stay small.

Written for exactly the vLLM releases in ``WRITTEN_FOR_VLLM`` (``data/support.yml`` pins this
module per engine version). Under any other vLLM the import fails, so a stage stops at start-up
instead of misbehaving at the first request. Remove a class once every supported vLLM does what it adds.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import vllm
import vllm.envs as vllm_envs
from vllm.v1.request import RequestStatus

REVISION = 4
WRITTEN_FOR_VLLM = ("0.26.0", "0.30.0")
if vllm.__version__ not in WRITTEN_FOR_VLLM:
    raise ImportError(f"vllm_omni_serve_kv revision {REVISION} is written for vLLM {', '.join(WRITTEN_FOR_VLLM)}, "
                      f"not {vllm.__version__}: deploy the vllm_omni.serve release that supports this vLLM")

# Under the "vllm" logger, so vLLM's own handler and level apply in every stage process.
logger = logging.getLogger("vllm.vllm_omni_serve_kv")

PD_EVENT = "vllm_omni.serve PD"
PREFILL_HANDED_OFF = f"{PD_EVENT} prefill handed off"
DECODE_RECEIVED = f"{PD_EVENT} decode received KV"
CHECK_REQUEST_PREFIX = "vllm-omni-serve-check"
SUMMARY_SECONDS = 60.0

# Prefills that computed the whole prompt: their KV is worth sending.
_SENDABLE = (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_REPETITION)


class _HandOffEvidence:
    """The PD_EVENT lines, shared by both connectors (scheduler side: one instance per engine)."""

    def _init_evidence(self) -> None:
        # Decode side: request id -> (transfer id, tokens to pull), until the KV has arrived.
        self._pulls: dict[str, tuple[str, int]] = {}
        self._events = 0
        self._events_since = time.monotonic()

    def _log_event(self, event: str, transfer_id: str, details: str) -> None:
        level = logging.INFO if CHECK_REQUEST_PREFIX in transfer_id else logging.DEBUG
        logger.log(level, "%s transfer_id=%s %s", event, transfer_id, details)
        self._events += 1
        elapsed = time.monotonic() - self._events_since
        if elapsed >= SUMMARY_SECONDS:
            logger.info("%s %s %d requests in the last %.0f s", PD_EVENT,
                        "handed off" if event == PREFILL_HANDED_OFF else "received KV for", self._events, elapsed)
            self._events, self._events_since = 0, time.monotonic()

    def _note_pull(self, request: Any, num_external_tokens: int) -> None:
        params = request.kv_transfer_params or {}
        if params.get("do_remote_prefill") and params.get("transfer_id"):
            # Read before vLLM clears do_remote_prefill in the upstream call.
            self._pulls[request.request_id] = (params["transfer_id"], num_external_tokens)

    def _note_received(self, connector_output: Any) -> None:
        for request_id in sorted(connector_output.finished_recving or ()):
            pull = self._pulls.pop(request_id, None)
            if pull is not None:
                self._log_event(DECODE_RECEIVED, pull[0], f"decode_request_id={request_id} tokens={pull[1]}")


# Each class is made on first use (vLLM's factory reads it off this module): vLLM's Mooncake module logs
# "Please install mooncake" when imported in a venv without it, which a NIXL engine's log should not say.


@functools.cache
def _mooncake_class() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import MooncakeConnector

    class ServeMooncakeConnector(_HandOffEvidence, MooncakeConnector):
        """vLLM's MooncakeConnector, handing ``remote_request_id`` back to vLLM-Omni's orchestrator."""

        def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(vllm_config, *args, **kwargs)
            kv = vllm_config.kv_transfer_config
            # Prefill side: where decode reaches this engine's bootstrap server (vLLM binds it on every
            # address at VLLM_MOONCAKE_BOOTSTRAP_PORT; kv_ip is the address the plan gives the engine).
            self._bootstrap_addr = f"http://{kv.kv_ip}:{vllm_envs.VLLM_MOONCAKE_BOOTSTRAP_PORT}"
            self._init_evidence()

        # --- prefill side (scheduler) ------------------------------------------------------------

        def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
            return self._finished(request, lambda: super(ServeMooncakeConnector, self).request_finished(request, block_ids),
                                  len(block_ids))

        def request_finished_all_groups(self, request: Any,
                                        block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
            return self._finished(request,
                                  lambda: super(ServeMooncakeConnector, self).request_finished_all_groups(request, block_ids),
                                  sum(len(group) for group in block_ids))

        def _finished(self, request: Any, upstream, blocks: int) -> tuple[bool, dict[str, Any] | None]:
            self._pulls.pop(request.request_id, None)
            params = request.kv_transfer_params or {}
            status = request.status
            handing_off = bool(params.get("do_remote_decode") and params.get("transfer_id") and status in _SENDABLE)
            if not handing_off:
                return upstream()
            # vLLM decides "send or free" on FINISHED_LENGTH_CAPPED alone; present every completed
            # prefill that way for the call, then restore the real status (the scheduler reads it later).
            request.status = RequestStatus.FINISHED_LENGTH_CAPPED
            try:
                delay_free_blocks, returned = upstream()
            finally:
                request.status = status
            handed = dict(returned or {})
            handed["remote_request_id"] = request.request_id
            handed["transfer_id"] = params["transfer_id"]
            handed["remote_bootstrap_addr"] = self._bootstrap_addr
            handed["remote_engine_id"] = self.engine_id
            self._log_event(PREFILL_HANDED_OFF, params["transfer_id"],
                            f"prefill_request_id={request.request_id} blocks={blocks} status={status.name}")
            return delay_free_blocks, handed

        # --- decode side (scheduler) -------------------------------------------------------------

        def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
            self._note_pull(request, num_external_tokens)
            super().update_state_after_alloc(request, blocks, num_external_tokens)

        def update_connector_output(self, connector_output: Any) -> None:
            super().update_connector_output(connector_output)
            self._note_received(connector_output)

    return ServeMooncakeConnector


@functools.cache
def _nixl_class() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector

    class ServeNixlConnector(_HandOffEvidence, NixlConnector):
        """vLLM's NixlConnector, listening for handshakes at the stage's own address and port."""

        def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(vllm_config, *args, **kwargs)
            kv = vllm_config.kv_transfer_config
            port = (kv.kv_connector_extra_config or {}).get("side_channel_port")
            scheduler = self.connector_scheduler
            if scheduler is not None and port is not None:
                # Before the listener starts (set_xfer_handshake_metadata, after the KV caches are registered);
                # what request_finished hands back (remote_host, remote_port) is read from the same two fields.
                scheduler.side_channel_host = kv.kv_ip
                scheduler.side_channel_port = int(port)
            self._init_evidence()

        # --- prefill side (scheduler) ------------------------------------------------------------

        def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
            return self._noted(request, super().request_finished(request, block_ids), len(block_ids))

        def request_finished_all_groups(self, request: Any,
                                        block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
            return self._noted(request, super().request_finished_all_groups(request, block_ids),
                               sum(len(group) for group in block_ids))

        def _noted(self, request: Any, result: tuple[bool, dict[str, Any] | None],
                   blocks: int) -> tuple[bool, dict[str, Any] | None]:
            self._pulls.pop(request.request_id, None)
            params = request.kv_transfer_params or {}
            returned = result[1]
            if params.get("do_remote_decode") and params.get("transfer_id") and returned \
                    and returned.get("remote_request_id"):
                self._log_event(PREFILL_HANDED_OFF, params["transfer_id"],
                                f"prefill_request_id={request.request_id} blocks={blocks} status={request.status.name}")
            return result

        # --- decode side (scheduler) -------------------------------------------------------------

        def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
            self._note_pull(request, num_external_tokens)
            super().update_state_after_alloc(request, blocks, num_external_tokens)

        def update_connector_output(self, connector_output: Any) -> None:
            super().update_connector_output(connector_output)
            self._note_received(connector_output)

    return ServeNixlConnector


_CLASSES = {"ServeMooncakeConnector": _mooncake_class, "ServeNixlConnector": _nixl_class}


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = _CLASSES[name]()
    cls.__qualname__ = name  # importable under that name: vllm_omni_serve_kv.ServeNixlConnector
    return cls
