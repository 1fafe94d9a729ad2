"""Turn what a device run brought back into a committable fixture (record/gpu-evidence.md).

    python3 tests/device/excerpt.py FILES_AT DEST

FILES_AT is the device tool's folder with results.json (a run or span call) or bench.json (a bench call)
and logs.tar.gz (one or more calls: give each folder, they are merged in order). DEST gets results.json
without the per-token gaps (their count stays; the summaries keep the percentiles), audio payloads and
all but the first of a fault's thousands of refusals, and log-excerpts.txt: for each
scenario, the lines that tell its story (stage launch, PD detection, the first hand-off and receipt
per request kind, bootstrap queries, every error line, shutdown), with ANSI colours removed.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The story of a run, in the order a reader needs it; a pattern with once=True keeps its first line only
# per request kind (warm, short, long, ...), so the excerpt stays short on long runs.
STORY = [
    (re.compile(r"Launching Orchestrator thread|PD disaggregation detected"), False),
    (re.compile(r"ERROR|Traceback|RuntimeError|EngineDeadError|device-side assert"), False),
    (re.compile(r"PD prefill handed off|PD decode received KV|\[OmniTiming\]"), True),
    (re.compile(r"PD (handed off|received KV for) \d+ requests"), False),
    (re.compile(r"GET /query"), True),
    (re.compile(r"Shutting down all"), False),
]
KIND = re.compile(r"check-[a-z0-9-]+?-(warm|short|long|c\d|audio|eosfirst|first)\d*")


def trim_request(request: dict) -> dict:
    out = {key: value for key, value in request.items() if key not in ("itl_s", "text")}
    if "itl_s" in request:
        out["itl_count"] = len(request["itl_s"])
    for key in ("ttft_s", "total_s", "seconds"):
        if isinstance(out.get(key), float):
            out[key] = round(out[key], 4)
    return out


KEEP_PER_LIST = 10  # a fault's request lists (thousands of refusals) keep their first ones; runs and phases sum them


def trim_fault(fault: dict) -> dict:
    out = dict(fault)
    for key, value in fault.items():
        if isinstance(value, list) and len(value) > 2 * KEEP_PER_LIST and all(isinstance(v, dict) for v in value):
            out[key] = value[:KEEP_PER_LIST]
            out[f"{key}_count"] = len(value)  # the whole list's length; its outcomes are in runs / phases
    return out


def trim(results: dict) -> dict:
    for name, scenario in results.items():
        if isinstance(scenario, dict) and isinstance(scenario.get("fault"), dict):
            scenario["fault"] = trim_fault(scenario["fault"])
        if not isinstance(scenario, dict) or "requests" not in scenario:
            continue
        for kind, requests in scenario["requests"].items():
            if isinstance(requests, list):
                scenario["requests"][kind] = [trim_request(r) for r in requests]
            elif isinstance(requests, dict):
                scenario["requests"][kind] = trim_request(requests)
        results[name] = scenario
    return results


def excerpt(name: str, lines: list[str]) -> list[str]:
    kept, seen = [], set()
    for raw in lines:
        line = ANSI.sub("", raw)
        if line.startswith("@@ "):  # one process's log begins (a scenario of several processes)
            kept.append(f"## {line[3:]}")
            seen.clear()
            continue
        for pattern, once in STORY:
            found = pattern.search(line)
            if not found:
                continue
            if once:
                kind = KIND.search(line)
                key = (found.group(0), kind.group(1) if kind else line[:40])
                if key in seen:
                    break
                seen.add(key)
            kept.append(line[:600])
            break
    return [f"===== {name} ({len(lines)} lines in the log's tail; excerpt)", *kept]


def read_source(source: Path, results: dict, dest: Path) -> dict[str, str]:
    """Merge one call's results into ``results``: a run call's results.json as it is; a bench call's bench.json
    (pd_serving.sh bench) as one entry per render, named after its scenario, ``-fault`` added where the call
    killed a stage; the renders' report.json files (the bench role's, for its compare mode) go to DEST/KEY/."""
    if (source / "results.json").is_file():
        loaded = json.loads((source / "results.json").read_text())
        results.update(loaded)
        return {name: name for name in loaded}
    bench = json.loads((source / "bench.json").read_text())
    keys = {}
    for render in bench["renders"]:
        key = render["scenario"] + ("-fault" if render.get("fault") else "")
        results[key] = {**render, "call": bench.get("call", {})}
        keys[render["scenario"]] = key
        report = source / render["scenario"] / "report.json"
        if report.is_file():
            (dest / key).mkdir(parents=True, exist_ok=True)
            (dest / key / "report.json").write_text(report.read_text())
    return keys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.exit(__doc__)
    *sources, dest = (Path(arg) for arg in argv)
    results: dict = {}
    logs: dict[str, list[str]] = {}
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        keys = read_source(source, results, dest)  # the source's scenario name -> its key in results
        with tarfile.open(source / "logs.tar.gz") as archive:
            for member in archive.getmembers():
                name = member.name.removesuffix(".log").split(".tail")[0]
                # A run call's scenario has one log (NAME) or one per process (NAME-PROCESS: span's head and
                # headless stages), each under its own heading in the excerpt.
                scenario = name if name in keys else next((k for k in keys if name.startswith(f"{k}-")), None)
                if member.isfile() and scenario is not None:
                    text = archive.extractfile(member).read().decode(errors="replace").splitlines()
                    logs.setdefault(keys[scenario], []).extend(([f"@@ {name}"] if name != scenario else []) + text)
    (dest / "results.json").write_text(json.dumps(trim(results), indent=1) + "\n")
    text = [line for name in results if name in logs for line in excerpt(name, logs[name])]
    (dest / "log-excerpts.txt").write_text("\n".join(text) + "\n")
    print(f"{dest}: {len(results)} entries, {len(text)} log lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
