"""PD against aggregated on one GPU with the bench playbook's harness, and the real engine's /metrics.

Device side (issue 25; docs/gpu-evidence.md), after tests/device/pd_serving.sh staged the payload:
for each NAME=RENDER it starts the render's pipeline exactly as pd_serving.py does (argv, environment,
connector), waits for /health, saves GET /metrics (--log-stats is in the argv) to $OUT/metrics-NAME.prom,
runs `vllm bench serve` from the staged venv over the grid the bench role would (roles/bench/files/
vllm_omni_bench.py grid), and writes $OUT/NAME/{raw,meta}.json and report.json/report.md with that
tool. Plots and the comparison are made back here (the bench venv has matplotlib; the device has none):
    python roles/bench/files/vllm_omni_bench.py report --raw FILES_AT/NAME/raw.json --meta FILES_AT/NAME/meta.json --out DIR
    python roles/bench/files/vllm_omni_bench.py compare --report A/report.json --report B/report.json --out DIR
There is no front door here (no nginx on the device machine): the harness talks to the engine's own port
with the engine's API key, and meta.json says so.

With --fault STAGE, after a PD render's grid the stage engine process of that stage id is killed with SIGKILL
while clients stream (fault()): what the in-flight and the later requests saw, /health over time and whether
the API server lived on are written to $OUT/bench.json (issue 25, item 4: fault behaviour measured).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pd_serving as serving

BENCH = serving.REPO / "roles" / "bench" / "files" / "vllm_omni_bench.py"


def stage_pid(engine, stage: int) -> int | None:
    """The PID of a stage's engine-core process, as its own log lines name it, if it is ours and alive."""
    found = re.search(rf"\(StageEngineCoreProc_stage{stage}_replica0 pid=(\d+)\)", engine.text())
    if not found:
        return None
    pid = int(found.group(1))
    try:
        return pid if os.getsid(pid) == engine.process.pid else None  # the server runs in its own session
    except OSError:
        return None


def fault(engine, pipeline: dict, plan: dict, stage: int, window: float, lead: float = 8) -> dict:
    """kill -9 one stage's engine process while 4 clients stream, then watch for `window` seconds.

    Times are seconds from the kill. In-flight requests run with a 150 s client timeout (vLLM's Mooncake
    abort timeout is 480 s: a request still open at the end of the window is reported as open, not guessed).
    A probe request (30 s timeout) every 10 s shows whether new requests fail fast, hang or succeed.
    """
    model = plan["served_model_name"]
    pid = stage_pid(engine, stage)
    if pid is None:
        return {"stage": stage, "error": f"no live StageEngineCoreProc_stage{stage}_replica0 in the log"}
    others = {s["id"]: stage_pid(engine, s["id"]) for s in pipeline["stages"] if s["id"] != stage}
    prompt = "Tell me a long story about a lighthouse keeper. " * 20
    requests: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()
    clock = {"kill": None}

    def client(index: int) -> None:
        number = 0
        while not stop.is_set():
            number += 1
            started = time.monotonic()
            result = serving.chat(pipeline, model, f"fault-c{index}-{number}", prompt, max_tokens=256, timeout=150)
            with lock:
                requests.append({**result, "started": started, "ended": time.monotonic(), "kind": "client"})
            if result["status"] != 200 or result["error"]:
                stop.wait(0.5)  # a client that fails fast retries, but not in a tight loop

    def probe() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            started = time.monotonic()
            result = serving.chat(pipeline, model, f"fault-probe-{number}", "hi", max_tokens=8, timeout=30)
            with lock:
                requests.append({**result, "started": started, "ended": time.monotonic(), "kind": "probe"})
            stop.wait(max(0.0, 10 - (time.monotonic() - started)))

    log_offset = len(engine.text())
    threads = [threading.Thread(target=client, args=(index,), daemon=True) for index in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(lead)  # requests in flight on both stages
    clock["kill"] = kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    serving.log(f"fault: killed stage {stage} engine pid {pid}")
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    health: list[list] = []
    server_exit = None
    while time.monotonic() - kill < window:
        status, _unused = serving.http("GET", pipeline["url"] + "/health", key=None, timeout=2)
        now = round(time.monotonic() - kill, 1)
        if not health or health[-1][1] != status:
            health.append([now, status])
        if server_exit is None and engine.process.poll() is not None:
            server_exit = {"at_s": now, "returncode": engine.process.returncode}
        time.sleep(0.5)
    stop.set()
    time.sleep(2)
    with lock:
        seen = list(requests)
    open_at_end = sum(1 for thread in threads if thread.is_alive())

    def shown(item: dict) -> dict:
        return {"kind": item["kind"], "started_s": round(item["started"] - kill, 1),
                "ended_s": round(item["ended"] - kill, 1), "status": item["status"],
                "chunks": item["chunks"], "error": (item["error"] or "")[:160] or None,
                "finish_reason": item.get("finish_reason")}

    before = [shown(r) for r in seen if r["ended"] < kill]
    in_flight = [shown(r) for r in seen if r["started"] < kill <= r["ended"]]
    after = [shown(r) for r in seen if r["started"] >= kill]
    return {"stage": stage, "killed_pid": pid, "window_s": window,
            "other_stages_alive_after": {str(s): (p is not None and _alive(p)) for s, p in others.items()},
            "completed_before_kill": len([r for r in before if r["status"] == 200 and not r["error"]]),
            "in_flight_at_kill": in_flight, "client_requests_still_open_at_end": open_at_end,
            "after_kill": after, "health": health, "server_exit": server_exit,
            "log_offset": log_offset}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def bench(name: str, render: Path, out: Path, logs: Path, spec: dict, ready_timeout: float,
          fault_stage: int | None = None, fault_window: float = 60, fault_after: float = 8) -> dict:
    plan = json.loads((render / "plan.json").read_text())
    pipeline = serving.lay_out(render, plan)
    venv = serving.make_venv(Path(pipeline["paths"]["venv"]))
    serving.fresh_home(plan["paths"]["engine_home"])
    serving.install_connector(plan, venv["purelib"])
    engine = serving.Engine(pipeline, name, logs, plan["paths"]["engine_home"])
    engine.start()
    record: dict = {"scenario": name, "layout": plan["layout"], "gpus": pipeline["gpus"]}
    try:
        record["ready"] = engine.wait_ready(ready_timeout)
        serving.log(f"{name}: ready={record['ready']}")
        if not record["ready"]["ready"]:
            return record
        with urllib.request.urlopen(pipeline["url"] + "/metrics", timeout=30) as response:  # noqa: S310
            (out / f"metrics-{name}.prom").write_bytes(response.read())
        grid = json.loads(subprocess.run([sys.executable, str(BENCH), "grid", "--spec", json.dumps(spec)],
                                         capture_output=True, text=True, check=True).stdout)
        work = out / name
        work.mkdir(parents=True, exist_ok=True)
        (work / "grid.json").write_text(json.dumps(grid))
        env = {**engine.env, "OPENAI_API_KEY": serving.API_KEY, "HF_HUB_OFFLINE": "1"}
        results = []
        for index, cell in enumerate(grid):
            argv = [str(Path(pipeline["paths"]["venv"]) / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
                    "--base-url", pipeline["url"], "--endpoint", "/v1/chat/completions", "--model", plan["model"],
                    "--served-model-name", plan["served_model_name"], "--tokenizer", plan["model"],
                    "--dataset-name", "random", "--random-input-len", str(cell["input_len"]),
                    "--random-output-len", str(cell["output_len"]), "--num-prompts", str(cell["num_prompts"]),
                    "--max-concurrency", str(cell["concurrency"]), "--ignore-eos", "--disable-tqdm",
                    "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                    "--save-result", "--result-dir", str(work), "--result-filename", f"cell-{index}.json"]
            started = time.monotonic()
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=900)
            (logs / f"{name}-bench-{index}.log").write_text(done.stdout + done.stderr)
            serving.log(f"{name}: cell {cell} rc={done.returncode} in {time.monotonic() - started:.0f} s")
            results.append(str(work / f"cell-{index}.json"))
            if done.returncode != 0:
                record["bench_error"] = done.stderr[-2000:]
                return record
        subprocess.run([sys.executable, str(BENCH), "normalize", "--grid", str(work / "grid.json"), "--out",
                        str(work / "raw.json"), *[f"--vllm-result={path}" for path in results]], check=True)
        meta = {"deployment_id": plan["deployment_id"], "label": name,
                "url": pipeline["url"] + " (engine port; no front door here)",
                "backend": "engine", "simulator": False, "engine": plan["engine"]["vllm_omni_version"],
                "layout": plan["layout"], "model": plan["served_model_name"], "pipelines": 1,
                "gpus": len(set(pipeline["gpus"])), "harness": "vllm",
                "harness_note": "vllm bench serve from the staged engine venv, random dataset, lengths in tokens, EOS ignored",
                "bench_host": "device", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (work / "meta.json").write_text(json.dumps(meta, indent=1))
        subprocess.run([sys.executable, str(BENCH), "report", "--raw", str(work / "raw.json"), "--meta",
                        str(work / "meta.json"), "--out", str(work)], check=True)
        record["report"] = json.loads((work / "report.json").read_text())["cells"]
        # After load: the histograms and the cross-stage transfer series carry observations now.
        with urllib.request.urlopen(pipeline["url"] + "/metrics", timeout=30) as response:  # noqa: S310
            (out / f"metrics-{name}-after-load.prom").write_bytes(response.read())
        record["after"] = engine.alive()
        if fault_stage is not None and plan["layout"] == "pd":
            record["fault"] = fault(engine, pipeline, plan, fault_stage, fault_window, fault_after)
            (logs / f"{name}-fault.log").write_text(engine.text()[record["fault"].pop("log_offset"):])
        return record
    finally:
        engine.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="+", help="NAME=RENDER_DIR")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--ready-timeout", type=float, default=420)
    parser.add_argument("--spec", default=json.dumps({"input_lens": [256, 1024], "output_lens": [64],
                                                      "concurrency": [1, 4, 16], "prompts_min": 8,
                                                      "prompts_per_concurrency": 4}))
    parser.add_argument("--compile-bytecode", action="store_true",
                        help="compileall the staged packages and the machine's first, as a venv build does")
    parser.add_argument("--fault", type=int, default=None, metavar="STAGE",
                        help="after a PD render's grid, kill -9 this stage id's engine process under load")
    parser.add_argument("--fault-window", type=float, default=60)
    parser.add_argument("--fault-after", type=float, default=8, help="seconds of load before the kill")
    args = parser.parse_args()
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    records = []
    if args.compile_bytecode:
        (out / "bytecode.json").write_text(json.dumps(serving.compile_bytecode(), indent=1))
    for item in args.scenarios:
        name, _sep, render = item.partition("=")
        records.append(bench(name, Path(render), out, logs, json.loads(args.spec), args.ready_timeout,
                             args.fault, args.fault_window, args.fault_after))
        (out / "bench.json").write_text(json.dumps(records, indent=1))
    return 0 if all(r.get("report") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
