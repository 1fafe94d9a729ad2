"""Bounded load generator for the lab: chat completions, latencies, failures. Never an open-ended flood.

    python benchmarks/loadgen.py URL --requests 300 --concurrency 4 --key-file KEY [--ca-file CA] [--max-seconds 120]
        [--rate PER_SECOND] [--json]

An https:// URL (the router's TLS front door) is checked against --ca-file (the collection's CA).

Bounded by request count AND wall time (and, with --rate, by requests started per second: each request is a new
TLS connection, so an unpaced run at concurrency 4 keeps a core of the lab busy between client, front door, router
and engine), and it refuses any target outside the lab bridge
(10.77.0.0/24) or loopback, so it cannot be pointed at someone else's service.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import ipaddress
import json
import signal
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ALLOWED = [ipaddress.ip_network("10.77.0.0/24"), ipaddress.ip_network("127.0.0.0/8")]


def allowed(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in ALLOWED)


def one_request(url: str, key: str | None, model: str, max_tokens: int, timeout: float,
                context: ssl.SSLContext | None = None) -> tuple[float, int, str]:
    parts = urlsplit(url)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}],
                       "max_tokens": max_tokens, "modalities": ["text"]})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    start = time.perf_counter()
    try:
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        connection.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        status = response.status
        detail = "" if status == 200 else payload[:200].decode(errors="replace")
    except OSError as error:
        status, detail = 0, f"{type(error).__name__}: {error}"
    return time.perf_counter() - start, status, detail


def run(url: str, requests: int, concurrency: int, key: str | None, model: str, max_tokens: int,
        max_seconds: float, context: ssl.SSLContext | None = None, rate: float | None = None) -> dict:
    deadline = time.monotonic() + max_seconds
    paced_from = time.monotonic()
    stop = threading.Event()
    # SIGTERM/SIGINT end the run early but still print the report (used to wrap a rolling upgrade).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    lock = threading.Lock()
    results: list[tuple[float, int, str]] = []
    issued = 0

    def worker():
        nonlocal issued
        while True:
            with lock:
                if issued >= requests or time.monotonic() >= deadline or stop.is_set():
                    return
                # The n-th request starts no earlier than n / rate seconds in; slots missed while requests hung
                # start at once, at most `concurrency` of them together.
                start_at = paced_from + issued / rate if rate else 0.0
                if start_at >= deadline:
                    return
                issued += 1
            if stop.wait(max(0.0, start_at - time.monotonic())):
                return
            outcome = one_request(url, key, model, max_tokens, timeout=min(60.0, max_seconds), context=context)
            with lock:
                results.append(outcome)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _round in range(concurrency)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=0.2)
    ok = sorted(latency for latency, status, _unused in results if status == 200)
    failures = [(status, detail) for _unused, status, detail in results if status != 200]

    def pct(p: float) -> float | None:
        return round(ok[min(len(ok) - 1, int(p * len(ok)))] * 1000, 3) if ok else None

    return {"url": url, "sent": len(results), "ok": len(ok), "failed": len(failures),
            "failures": sorted({f"{s} {d}" for s, d in failures})[:5],
            "seconds": round(time.monotonic() - started, 2),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "mean_ms": round(statistics.mean(ok) * 1000, 3) if ok else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--key-file")
    parser.add_argument("--ca-file", help="CA to check an https:// URL against (the front door's)")
    parser.add_argument("--model", default="qwen3-omni")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=120)
    parser.add_argument("--rate", type=float, help="requests started per second at most (default: as fast as answered)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not allowed(args.url):
        sys.exit(f"loadgen: {args.url} is outside the lab bridge and loopback; refusing")
    if not 1 <= args.requests <= 100000 or not 1 <= args.concurrency <= 64 or not 1 <= args.max_seconds <= 3600:
        sys.exit("loadgen: requests 1-100000, concurrency 1-64, max-seconds 1-3600")
    if args.rate is not None and not 0.1 <= args.rate <= 10000:
        sys.exit("loadgen: rate 0.1-10000 requests a second")
    key = Path(args.key_file).read_text().strip() if args.key_file else None
    context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    report = run(args.url, args.requests, args.concurrency, key, args.model, args.max_tokens, args.max_seconds,
                 context, args.rate)
    with contextlib.suppress(BrokenPipeError):  # the reader went away; nothing left to tell it
        print(json.dumps(report) if args.json else report, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
