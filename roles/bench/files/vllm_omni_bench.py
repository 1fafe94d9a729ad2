# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""vllm_omni.serve's benchmark tool: the load client of last resort, the report and the comparison.

Subcommands (the bench playbook calls them; each also works by hand):

    grid     --spec JSON   the cells of a grid (JSON list on stdout)
    client   --url URL --grid GRID.json --out RAW.json [--ca-file CA] [--model M]
             The built-in streaming client (stdlib only): for each cell of GRID ({input_len, output_len,
             concurrency, num_prompts}) it sends num_prompts streamed chat completions, concurrency at a
             time, and records TTFT (first content chunk), ITL (gaps between content chunks), E2E, tokens.
             The API key comes from stdin (--key-stdin) or $OPENAI_API_KEY (as for vLLM's own client), never argv.
             Input lengths are words, not tokens (it has no tokenizer): the report says so.
    normalize --vllm-result CELL.json [...] --grid GRID.json --out RAW.json
             Turns `vllm bench serve --save-result` files (one per cell, in GRID's order) into RAW.
    report   --raw RAW.json --meta META.json --out DIR
             DIR/report.json, DIR/report.md and PNG plots (matplotlib, where importable: the bench venv).
    compare  --report A/report.json --report B/report.json --out DIR
             DIR/compare.md (A and B side by side, B/A ratios) and compare PNGs.

Everything but the plots is stdlib-only, so the client runs with any host's python3 (3.10+).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import ssl
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

SCHEMA = 1
STATS = ("ttft_ms", "itl_ms", "tpot_ms", "e2el_ms")
PERCENTILES = (50, 99)


# --- statistics ---------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile with linear interpolation (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict:
    """{mean, p50, p99} in the unit given, None where there are no values."""
    out = {"mean": sum(values) / len(values) if values else None}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(values, p)
    return out


def cell_result(cell: dict, samples: list[dict], duration_s: float) -> dict:
    """One grid cell's result from per-request samples ({ok, ttft_s, itls_s, e2e_s, output_tokens,
    prompt_words})."""
    ok = [s for s in samples if s["ok"]]
    output_tokens = sum(s["output_tokens"] for s in ok)
    input_tokens = sum(s.get("input_tokens", 0) for s in ok)
    tpots = [(s["e2e_s"] - s["ttft_s"]) / (s["output_tokens"] - 1) for s in ok if s["output_tokens"] > 1]
    duration = max(duration_s, 1e-9)
    return {
        **{k: cell[k] for k in ("input_len", "output_len", "concurrency", "num_prompts")},
        "completed": len(ok), "failed": len(samples) - len(ok), "duration_s": duration_s,
        "request_throughput": len(ok) / duration,
        "output_throughput": output_tokens / duration,
        "total_token_throughput": (input_tokens + output_tokens) / duration,
        "ttft_ms": summary([s["ttft_s"] * 1000 for s in ok if s["ttft_s"] is not None]),
        "itl_ms": summary([gap * 1000 for s in ok for gap in s["itls_s"]]),
        "tpot_ms": summary([t * 1000 for t in tpots]),
        "e2el_ms": summary([s["e2e_s"] * 1000 for s in ok]),
        "errors": sorted({s["error"] for s in samples if not s["ok"]})[:5],
    }


def from_vllm(cell: dict, result: dict) -> dict:
    """A `vllm bench serve --save-result` document (0.26: mean_/median_/pNN_<metric>_ms, completed,
    failed, duration, request_throughput, output_throughput, total_token_throughput) as one cell result."""
    def stat(metric: str) -> dict:
        return {"mean": result.get(f"mean_{metric}_ms"),
                "p50": result.get(f"p50_{metric}_ms", result.get(f"median_{metric}_ms")),
                "p99": result.get(f"p99_{metric}_ms")}
    completed = int(result.get("completed", 0))
    return {
        **{k: cell[k] for k in ("input_len", "output_len", "concurrency", "num_prompts")},
        "completed": completed,
        "failed": int(result.get("failed", result.get("num_prompts", cell["num_prompts"]) - completed)),
        "duration_s": float(result.get("duration", 0.0)),
        "request_throughput": float(result.get("request_throughput", 0.0)),
        "output_throughput": float(result.get("output_throughput", 0.0)),
        "total_token_throughput": float(result.get("total_token_throughput", 0.0)),
        **{name: stat(name.removesuffix("_ms")) for name in STATS},
        "errors": [e for e in result.get("errors", []) if e][:5],
    }


def grid(input_lens: list[int], output_lens: list[int], concurrency: list[int], prompts_min: int,
         prompts_per_concurrency: int) -> list[dict]:
    """Every input length with every output length, each at every concurrency; requests per cell:
    prompts_per_concurrency x concurrency, at least prompts_min."""
    values = {"input length": input_lens, "output length": output_lens, "concurrency": concurrency}
    for what, numbers in values.items():
        if not numbers or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in numbers):
            raise ValueError(f"the {what}s must be a non-empty list of positive integers, got {numbers!r}")
    return [{"input_len": isl, "output_len": osl, "concurrency": conc,
             "num_prompts": max(prompts_min, prompts_per_concurrency * conc)}
            for isl in sorted(set(input_lens)) for osl in sorted(set(output_lens)) for conc in sorted(set(concurrency))]


# --- the built-in client ------------------------------------------------------------------------


def prompt_of(words: int) -> str:
    """A deterministic prompt of about ``words`` words (the client has no tokenizer)."""
    vocabulary = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    body = " ".join(vocabulary[i % len(vocabulary)] for i in range(max(words - 4, 1)))
    return f"Repeat after me: {body}."


def stream_one(url: str, key: str | None, model: str, cell: dict, timeout: float,
               context: ssl.SSLContext | None) -> dict:
    """One streamed chat completion: TTFT, inter-chunk gaps, E2E, output tokens (usage where the server
    sends it, else content chunks)."""
    parts = urlsplit(url)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt_of(cell["input_len"])}],
                       "max_tokens": cell["output_len"], "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}, "modalities": ["text"]})
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    sample = {"ok": False, "ttft_s": None, "itls_s": [], "e2e_s": 0.0, "output_tokens": 0,
              "input_tokens": 0, "error": ""}
    start = time.perf_counter()
    try:
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout,
                                                     context=context)
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        connection.request("POST", (parts.path.rstrip("/") or "") + "/v1/chat/completions", body=body,
                           headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            sample["error"] = f"HTTP {response.status}"
            response.read()
            connection.close()
            return sample
        last, chunks, usage = None, 0, None
        for raw in response:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                usage = event["usage"]
            content = "".join((choice.get("delta") or {}).get("content") or "" for choice in event.get("choices", []))
            if not content:
                continue
            now = time.perf_counter()
            if last is None:
                sample["ttft_s"] = now - start
            else:
                sample["itls_s"].append(now - last)
            last, chunks = now, chunks + 1
        connection.close()
        sample["e2e_s"] = time.perf_counter() - start
        sample["output_tokens"] = int((usage or {}).get("completion_tokens") or chunks)
        sample["input_tokens"] = int((usage or {}).get("prompt_tokens") or 0)
        sample["ok"] = chunks > 0
        if not sample["ok"]:
            sample["error"] = "no content streamed"
    except (OSError, ValueError, http.client.HTTPException) as error:
        sample["error"] = type(error).__name__
        sample["e2e_s"] = time.perf_counter() - start
    return sample


def run_cell(url: str, key: str | None, model: str, cell: dict, timeout: float,
             context: ssl.SSLContext | None) -> dict:
    lock = threading.Lock()
    samples: list[dict] = []
    issued = 0

    def worker():
        nonlocal issued
        while True:
            with lock:
                if issued >= cell["num_prompts"]:
                    return
                issued += 1
            sample = stream_one(url, key, model, cell, timeout, context)
            with lock:
                samples.append(sample)

    threads = [threading.Thread(target=worker, daemon=True) for _index in range(cell["concurrency"])]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return cell_result(cell, samples, time.perf_counter() - start)


# --- the report -----------------------------------------------------------------------------------


def _fmt(value, digits=1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def build_report(raw: dict, meta: dict) -> dict:
    """report.json: what ran against what (meta), and one row per cell, with throughput per GPU."""
    gpus = max(int(meta.get("gpus", 0)), 0)
    rows = []
    for row in raw["cells"]:
        per_gpu = row["output_throughput"] / gpus if gpus else None
        rows.append({**row, "output_throughput_per_gpu": per_gpu})
    rows.sort(key=lambda r: (r["input_len"], r["output_len"], r["concurrency"]))
    return {"schema": SCHEMA, "meta": meta, "cells": rows}


def report_markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [f"# Benchmark: {meta.get('label') or meta.get('deployment_id', '')}", ""]
    if meta.get("simulator"):
        lines += ["**SIMULATOR**: this ran against the lab's simulator (xpyd-sim) standing in for the engine; "
                  "its latencies are the simulator's, not a GPU's.", ""]
    scheme = "TLS" if str(meta.get("url", "")).startswith("https") else "plain HTTP"
    lines += [f"- Target: {meta.get('url')} (front door: {scheme})",
              f"- Backend: {meta.get('backend')}; layout: {meta.get('layout')}; pipelines: {meta.get('pipelines')}; "
              f"GPUs: {meta.get('gpus')}",
              f"- Harness: {meta.get('harness')} ({meta.get('harness_note', '')})",
              f"- Model: {meta.get('model')}; started {meta.get('started')}", ""]
    lines += ["| ISL | OSL | Concurrency | OK / failed | req/s | output tok/s | tok/s per GPU "
              "| TTFT p50 / p99 ms | ITL p50 / p99 ms | E2E p50 ms |",
              "| ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | --- | ---: |"]
    for r in report["cells"]:
        lines.append(
            f"| {r['input_len']} | {r['output_len']} | {r['concurrency']} | {r['completed']} / {r['failed']} "
            f"| {_fmt(r['request_throughput'], 2)} | {_fmt(r['output_throughput'])} "
            f"| {_fmt(r['output_throughput_per_gpu'])} "
            f"| {_fmt(r['ttft_ms']['p50'])} / {_fmt(r['ttft_ms']['p99'])} "
            f"| {_fmt(r['itl_ms']['p50'], 2)} / {_fmt(r['itl_ms']['p99'], 2)} | {_fmt(r['e2el_ms']['p50'])} |")
    failed = [r for r in report["cells"] if r["failed"]]
    if failed:
        lines += ["", "Failures: " + "; ".join(
            f"ISL {r['input_len']} OSL {r['output_len']} c{r['concurrency']}: "
            f"{r['failed']} ({', '.join(r['errors']) or 'no detail'})" for r in failed)]
    if meta.get("plots"):
        lines += ["", *[f"![{name}]({name})" for name in meta["plots"]]]
    return "\n".join(lines) + "\n"


def series(report: dict) -> dict:
    """{(input_len, output_len): {concurrency: [...], metric: [...]}} for the plots."""
    out: dict = {}
    for r in report["cells"]:
        entry = out.setdefault((r["input_len"], r["output_len"]), {
            "concurrency": [], "ttft_p50": [], "ttft_p99": [], "itl_p50": [], "itl_p99": [],
            "output_throughput": [], "output_throughput_per_gpu": []})
        entry["concurrency"].append(r["concurrency"])
        entry["ttft_p50"].append(r["ttft_ms"]["p50"])
        entry["ttft_p99"].append(r["ttft_ms"]["p99"])
        entry["itl_p50"].append(r["itl_ms"]["p50"])
        entry["itl_p99"].append(r["itl_ms"]["p99"])
        entry["output_throughput"].append(r["output_throughput"])
        entry["output_throughput_per_gpu"].append(r["output_throughput_per_gpu"])
    return out


PLOTS = (("ttft.png", "TTFT (ms)", ("ttft_p50", "ttft_p99")),
         ("itl.png", "ITL (ms)", ("itl_p50", "itl_p99")),
         ("throughput.png", "output tokens/s", ("output_throughput",)),
         ("throughput_per_gpu.png", "output tokens/s per GPU", ("output_throughput_per_gpu",)))


def plot(reports: list[tuple[str, dict]], out: Path, prefix: str = "") -> list[str]:
    """One PNG per metric: the metric against concurrency, a line per (ISL, OSL) and report. [] when
    matplotlib is missing (the report says so)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for name, ylabel, keys in PLOTS:
        figure, axis = plt.subplots(figsize=(7, 4.5), dpi=100)
        for label, report in reports:
            for (isl, osl), data in sorted(series(report).items()):
                for key in keys:
                    points = [(c, v) for c, v in zip(data["concurrency"], data[key], strict=True) if v is not None]
                    if not points:
                        continue
                    style = "--" if key.endswith("p99") else "-"
                    tag = f"{label} " if label else ""
                    suffix = f" {key.rsplit('_', 1)[1]}" if key.endswith(("p50", "p99")) else ""
                    axis.plot([p[0] for p in points], [p[1] for p in points], style, marker="o",
                              label=f"{tag}ISL {isl} / OSL {osl}{suffix}")
        axis.set_xlabel("concurrency")
        axis.set_ylabel(ylabel)
        simulator = any(r["meta"].get("simulator") for _label, r in reports)
        axis.set_title(f"{ylabel} vs concurrency" + (" (SIMULATOR)" if simulator else ""))
        axis.grid(True, alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(out / f"{prefix}{name}")
        plt.close(figure)
        written.append(f"{prefix}{name}")
    return written


def write_report(raw: dict, meta: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(raw, meta)
    report["meta"]["plots"] = plot([("", report)], out)
    if not report["meta"]["plots"]:
        report["meta"]["plots_note"] = "matplotlib is not importable here: no plots"
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (out / "report.md").write_text(report_markdown(report))
    return report


# --- compare --------------------------------------------------------------------------------------


def _label(report: dict, fallback: str) -> str:
    meta = report["meta"]
    return meta.get("label") or f"{meta.get('layout', '?')} ({fallback})"


def compare_markdown(a: dict, b: dict) -> str:
    """A and B side by side on the cells both have, with B/A."""
    la, lb = _label(a, "A"), _label(b, "B")
    if la == lb:
        la, lb = f"{la} A", f"{lb} B"
    index = {(r["input_len"], r["output_len"], r["concurrency"]): r for r in b["cells"]}
    lines = [f"# Compare: {la} vs {lb}", ""]
    for name, report in (("A", a), ("B", b)):
        meta = report["meta"]
        lines.append(f"- {name} = {_label(report, name)}: {meta.get('backend')}, layout {meta.get('layout')}, "
                     f"{meta.get('gpus')} GPU(s), harness {meta.get('harness')}, {meta.get('started')}"
                     + (" **SIMULATOR**" if meta.get("simulator") else ""))
    lines += ["", "| ISL | OSL | Conc. | metric | A | B | B/A |", "| ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    common = 0
    for r in a["cells"]:
        other = index.get((r["input_len"], r["output_len"], r["concurrency"]))
        if other is None:
            continue
        common += 1
        for metric, get in (("TTFT p50 ms", lambda x: x["ttft_ms"]["p50"]), ("TTFT p99 ms", lambda x: x["ttft_ms"]["p99"]),
                            ("ITL p50 ms", lambda x: x["itl_ms"]["p50"]), ("ITL p99 ms", lambda x: x["itl_ms"]["p99"]),
                            ("output tok/s", lambda x: x["output_throughput"]),
                            ("tok/s per GPU", lambda x: x["output_throughput_per_gpu"])):
            va, vb = get(r), get(other)
            ratio = f"{vb / va:.2f}" if va and vb is not None else "-"
            lines.append(f"| {r['input_len']} | {r['output_len']} | {r['concurrency']} | {metric} "
                         f"| {_fmt(va, 2)} | {_fmt(vb, 2)} | {ratio} |")
    if not common:
        lines += ["", "The two reports have no (ISL, OSL, concurrency) cell in common."]
    return "\n".join(lines) + "\n"


def write_compare(a: dict, b: dict, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(compare_markdown(a, b))
    la, lb = _label(a, "A"), _label(b, "B")
    if la == lb:
        la, lb = f"{la} A", f"{lb} B"
    return plot([(la, a), (lb, b)], out, prefix="compare_")


# --- command line ---------------------------------------------------------------------------------


def _context(ca_file: str | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cells = sub.add_parser("grid")
    cells.add_argument("--spec", required=True,
                       help="JSON: input_lens, output_lens, concurrency, prompts_min, prompts_per_concurrency")
    client = sub.add_parser("client")
    client.add_argument("--url", required=True)
    client.add_argument("--grid", required=True)
    client.add_argument("--out", required=True)
    client.add_argument("--ca-file")
    client.add_argument("--model", required=True)
    client.add_argument("--timeout", type=float, default=600.0)
    client.add_argument("--key-stdin", action="store_true",
                        help="read the API key from the first line of stdin (else $OPENAI_API_KEY)")
    normalize = sub.add_parser("normalize")
    normalize.add_argument("--vllm-result", action="append", required=True)
    normalize.add_argument("--grid", required=True)
    normalize.add_argument("--out", required=True)
    report = sub.add_parser("report")
    report.add_argument("--raw", required=True)
    report.add_argument("--meta", required=True)
    report.add_argument("--out", required=True)
    compare = sub.add_parser("compare")
    compare.add_argument("--report", action="append", required=True)
    compare.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    if args.command == "grid":
        spec = json.loads(args.spec)
        try:
            print(json.dumps(grid(spec["input_lens"], spec["output_lens"], spec["concurrency"], int(spec["prompts_min"]),
                                  int(spec["prompts_per_concurrency"]))))
        except ValueError as error:
            parser.error(str(error))
        return 0
    if args.command == "client":
        grid_cells = json.loads(Path(args.grid).read_text())
        context = _context(args.ca_file) if args.url.startswith("https") else None
        key = (sys.stdin.readline().strip() if args.key_stdin else os.environ.get("OPENAI_API_KEY")) or None
        cells = [run_cell(args.url, key, args.model, cell, args.timeout, context) for cell in grid_cells]
        Path(args.out).write_text(json.dumps({"harness": "builtin", "cells": cells}, indent=1) + "\n")
        failed = sum(c["failed"] for c in cells)
        print(json.dumps({"cells": len(cells), "completed": sum(c["completed"] for c in cells), "failed": failed}))
        return 0
    if args.command == "normalize":
        grid_cells = json.loads(Path(args.grid).read_text())
        if len(grid_cells) != len(args.vllm_result):
            parser.error(f"{len(args.vllm_result)} result files for {len(grid_cells)} grid cells")
        cells = [from_vllm(cell, json.loads(Path(path).read_text()))
                 for cell, path in zip(grid_cells, args.vllm_result, strict=True)]
        Path(args.out).write_text(json.dumps({"harness": "vllm", "cells": cells}, indent=1) + "\n")
        return 0
    if args.command == "report":
        written = write_report(json.loads(Path(args.raw).read_text()), json.loads(Path(args.meta).read_text()),
                               Path(args.out))
        print(json.dumps({"report": str(Path(args.out) / "report.json"), "plots": written["meta"]["plots"],
                          "cells": len(written["cells"]), "failed": sum(c["failed"] for c in written["cells"])}))
        return 0
    if len(args.report) != 2:
        parser.error("compare takes exactly two --report files")
    a, b = (json.loads(Path(path).read_text()) for path in args.report)
    plots = write_compare(a, b, Path(args.out))
    print(json.dumps({"compare": str(Path(args.out) / "compare.md"), "plots": plots}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
