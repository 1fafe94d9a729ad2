"""The stage-based runtime's handshake across hosts, with vLLM-Omni's own code (run by an engine venv's Python).

On a CPU host the engine's head and headless processes both stop at the worker class lookup, before
the head starts its OmniMasterServer and before a headless stage registers (tests/conformance shows
where). This runs the part after that with the engine's own classes and the values of the units'
argv and environment:

    head:     python stage_handshake.py head ADDRESS PORT STAGE_ID REPLICAS TIMEOUT
              (VLLM_PORT set as in the head's engine.env)
    headless: python stage_handshake.py headless MASTER_ADDRESS MASTER_PORT STAGE_ID REPLICA_ADDRESS

The head starts ``OmniMasterServer`` for stage 0 (its own) and STAGE_ID (REPLICAS remote slots), waits
for a registration, then binds the handshake socket the master allocated for it and waits for the
headless side's first message there. The headless side registers with
``register_stage_with_omni_master`` (as ``--headless`` does), then connects to the handshake address
the master handed back and sends one message. Each prints one JSON line prefixed ``@@handshake@@``.
"""

from __future__ import annotations

import json
import sys
import time

import zmq
from vllm_omni.engine.stage_engine_startup import OmniMasterServer, register_stage_with_omni_master

MARK = "@@handshake@@"


def head(address: str, port: int, stage_id: int, replicas: int, timeout: float) -> dict:
    server = OmniMasterServer(address, port, [0, stage_id], {0: 1, stage_id: replicas},
                              head_local_replicas={0: [0]})
    server.start()
    try:
        server.get_stage_config(stage_id, timeout_s=timeout, replica_id=0)
        allocation = server.get_allocation(stage_id, 0)
        server.release_route_port_reservations(stage_id, 0, handshake=True, data=False)
        context = zmq.Context()
        socket = context.socket(zmq.ROUTER)
        socket.bind(allocation.handshake_bind_address)
        got = None
        if socket.poll(timeout=int(timeout * 1000)):
            got = socket.recv_multipart()[-1].decode()
        socket.close(linger=0)
        context.term()
        return {"registered": True, "replica_host": server.get_replica_host(stage_id, 0),
                "handshake_address": allocation.handshake_bind_address, "handshake_message": got}
    except TimeoutError as error:
        return {"registered": False, "error": str(error)}
    finally:
        server.stop()


def headless(master_address: str, master_port: int, stage_id: int, replica_address: str) -> dict:
    started = time.monotonic()
    response = register_stage_with_omni_master(omni_master_address=master_address, omni_master_port=master_port,
                                               omni_stage_id=stage_id, omni_stage_config={"stage_id": stage_id},
                                               replica_id=None, replica_bind_address=replica_address)
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.connect(response.handshake_address)
    socket.send(f"hello from stage {stage_id} at {replica_address}".encode())
    time.sleep(1)  # let the message leave before the socket closes
    socket.close(linger=1000)
    context.term()
    return {"registered": True, "replica_id": response.replica_id, "handshake_address": response.handshake_address,
            "seconds": round(time.monotonic() - started, 2)}


def main(argv: list[str]) -> int:
    try:
        if argv[0] == "head":
            result = head(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]))
        else:
            result = headless(argv[1], int(argv[2]), int(argv[3]), argv[4])
    except Exception as error:  # reported as data: the lab test asserts on it
        result = {"registered": False, "error": f"{type(error).__name__}: {error}"}
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
