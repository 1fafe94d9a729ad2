"""A distributed pipeline's head that errs for good once it loses a stage, as vLLM-Omni 0.26's head does on a GPU.

The lab's head stand-in (vllm-router in PD mode, tests/lab/test_multihost.py) recovers by itself when its decode
stage comes back. The real head does not (record/gpu-evidence.md run 9 and the 2026-12-06 H100 run; upstream
vLLM-Omni #5325): once a stage is lost its orchestrator is errored, /health answers 503 and every request HTTP 500,
until the process is restarted. This proxy gives the stand-in that behaviour: it listens on the head's address and
API port and forwards every request to the stand-in router, moved to loopback on the same port. Once the head has
answered a request and then the router fails one (5xx, or no answer), it latches: from then on /health is 503 and
everything else HTTP 500, whatever the router would say.

    python3 head_latch.py LISTEN_ADDRESS PORT        (the router on 127.0.0.1:PORT)

Standard library only (the lab host's python3); one line on stderr (the unit's journal) when it latches.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATCHED_LINE = "head_latch: latched: a stage was lost; /health 503 and HTTP 500 from now on (EngineDeadError)"
# What the errored engine answers (vLLM-Omni's own text), to /health (503) and to everything else (500).
DEAD = json.dumps({"error": {"message": "EngineDeadError: the engine is dead", "type": "InternalServerError"}}).encode()
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
              "proxy-authenticate"}


class State:
    served = False
    latched = False
    lock = threading.Lock()


def make_handler(upstream_port: int):
    class Head(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            # The body is read whatever the answer: left unread on a kept-alive connection, it would be parsed as the
            # next request.
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if State.latched:
                status = 503 if self.path == "/health" else 500
                self._answer(status, DEAD)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
            try:
                connection = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                payload, status = response.read(), response.status
                content_type = response.getheader("Content-Type", "application/json")
                connection.close()
            except OSError as error:
                payload, status, content_type = f"head_latch: router: {error}".encode(), 502, "text/plain"
            if self.path != "/health" and self.path.startswith("/v1/"):
                with State.lock:
                    if status < 300:
                        State.served = True
                    elif status >= 500 and State.served and not State.latched:
                        State.latched = True
                        print(LATCHED_LINE, file=sys.stderr, flush=True)
            if State.latched:  # this request is the first the dead engine fails
                self._answer(500, DEAD)
                return
            self._answer(status, payload, content_type)

        do_GET = do_POST = _forward

        def log_message(self, *args):
            pass

    return Head


def main() -> int:
    address, port = sys.argv[1], int(sys.argv[2])
    server = ThreadingHTTPServer((address, port), make_handler(port))
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
