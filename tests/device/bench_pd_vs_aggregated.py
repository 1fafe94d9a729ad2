"""PD against aggregated on one GPU with the bench playbook's harness, the real engine's /metrics, and faults.

Device side (issue 25; record/gpu-evidence.md), after tests/device/pd_serving.sh staged the payload: for each
NAME=RENDER, in the order given, it starts the render's pipeline exactly as pd_serving.py does (argv,
environment, connector: whichever the plan names), waits for /health, saves GET /metrics (--log-stats is in the
argv), runs `vllm bench serve` from the staged venv over the grid the bench role would (roles/bench/files/
vllm_omni_bench.py grid; the same --spec for every render), and makes raw.json, meta.json and report.json with
that tool. With two renders it also runs that tool's compare on the two reports (markdown only: the device has
no matplotlib). There is no front door here (no nginx on the device machine): the harness talks to the engine's
own port with the engine's API key, and meta.json says so.

What comes back ($OUT; the device tool returns at most 8 files, 2 folders down):
    bench.json               every render's record (ready, the report's cells, the fault and restart), the call's
                             own timing and budget, the comparison's markdown
    NAME/report.json         per render: what `vllm_omni_bench.py compare --report A --report B` reads
    bench-files.tar.gz       per render NAME/{grid,raw,meta}.json, report.md, the harness's cell files, and
                             metrics-NAME.prom / metrics-NAME-after-load.prom
    logs.tar.gz              each engine log's head and tail, every bench cell's log, each fault's log slice whole
Back here, plots and the comparison with plots:
    tar -C DIR -xzf FILES_AT/bench-files.tar.gz
    python roles/bench/files/vllm_omni_bench.py report --raw DIR/NAME/raw.json --meta DIR/NAME/meta.json --out DIR/NAME
    python roles/bench/files/vllm_omni_bench.py compare --report FILES_AT/A/report.json --report FILES_AT/B/report.json --out DIR

--fault STAGE: after a PD render's grid, that stage id's engine process is killed with SIGKILL while clients
stream (fault()): what the in-flight and the later requests saw, /health over time and whether the API server
lived on. --restart-after-fault: then, as the unit's Restart=always would on a host (the device has no systemd;
faults.Unit), the rest of the unit is stopped, RestartSec passes and the same argv and environment start again;
seconds from the kill to the server's exit, the relaunch, /health 200 and the first chat completion answered in
full, with what clients saw meanwhile. --no-grid skips the harness (a call that only measures the fault).

--budget S: the call's own deadline (the device tool stops a call at 600 s). Before each step the script
compares what is left with its estimate (estimate(); the constants come from run 7, record/gpu-evidence.md 1f)
and skips what would not fit, saying so in bench.json, rather than being killed half-way. --estimate prints
the plan and its seconds without starting anything (tests/device/prepare.sh prints it for each call).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import faults
import pd_serving as serving

BENCH = serving.REPO / "roles" / "bench" / "files" / "vllm_omni_bench.py"
DEFAULT_SPEC = {"input_lens": [512], "output_lens": [32], "concurrency": [1, 4, 8], "prompts_min": 8,
                "prompts_per_concurrency": 2}

# Seconds, for the budget and --estimate. Observed: ready 106-160 s eager (runs 4-7; 144.1 s in run 7), ITL p50
# 56 ms and TTFT p50 243 / 836 ms at concurrency 1 / 8 (run 7), the API server's exit 5.0 s after a stage's kill
# (run 7). Assumed (not timed on its own): one `vllm bench serve` start (importing vLLM, loading the tokenizer).
EST = {"setup": 5, "ready": 150, "metrics": 2, "cell_start": 15, "itl": 0.06, "ttft": 0.9, "report": 3, "stop": 8,
       "exit_after_kill": 6, "check": 3, "clients_after": 20, "bytecode": 20}


def est_grid(spec: dict) -> float:
    cells = grid_cells(spec)
    return sum(EST["cell_start"] + math.ceil(c["num_prompts"] / c["concurrency"]) * (EST["ttft"] + c["output_len"] * EST["itl"])
               for c in cells)


def est_fault(window: float, lead: float, restart: bool, restart_sec: float = 15) -> float:
    if not restart:
        return lead + window + 2
    return lead + EST["exit_after_kill"] + 1 + restart_sec + EST["ready"] + EST["check"] + EST["clients_after"]


def grid_cells(spec: dict) -> list[dict]:
    done = subprocess.run([sys.executable, str(BENCH), "grid", "--spec", json.dumps(spec)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def osl_cap(plan: dict) -> int | None:
    """The final stage's own max_tokens: vLLM-Omni 0.26 applies a request's max_tokens to the first comprehension
    stage only, so a PD pipeline stops at decode's stage default whatever the harness asks (docs/engine-facts.md)."""
    if plan["layout"] != "pd":
        return None
    caps = []
    for host in plan["hosts"].values():
        for pipeline in host["pipelines"]:
            for stage in pipeline.get("stage_config", {}).get("stage_args", []):
                if stage.get("final_output"):
                    caps.append((stage.get("default_sampling_params") or {}).get("max_tokens"))
    caps = [c for c in caps if isinstance(c, int)]
    return min(caps) if caps else None


# --- the fault --------------------------------------------------------------------------------


def fault(engine, pipeline: dict, plan: dict, stage: int, window: float, lead: float = 8,
          unit: faults.Unit | None = None, deadline: float | None = None) -> dict:
    """kill -9 one stage's engine process while 4 clients stream, then watch for `window` seconds, or, with
    `unit`, until the API server exits and then through the unit's restart until it serves again.

    Times are seconds from the kill. In-flight requests run with a 150 s client timeout (vLLM's Mooncake
    abort timeout is 480 s: a request still open at the end is reported as open, not guessed). A probe request
    (30 s timeout) every 10 s shows whether new requests fail fast, hang or succeed.
    """
    model = plan["served_model_name"]
    pid = faults.stage_pid(engine, stage)
    if pid is None:
        return {"stage": stage, "error": f"no live StageEngineCoreProc_stage{stage}_replica0 in the log"}
    others = {s["id"]: faults.stage_pid(engine, s["id"]) for s in pipeline["stages"] if s["id"] != stage}
    log_offset = len(engine.text())
    load = faults.Load(pipeline, model)
    load.start()
    time.sleep(lead)  # requests in flight on both stages
    kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    serving.log(f"fault: killed stage {stage} engine pid {pid}")
    watch = faults.LogWatch({"engine": engine}, kill)
    health: list[list] = []
    server_exit = None
    while time.monotonic() - kill < window:
        status, _unused = serving.http("GET", pipeline["url"] + "/health", key=None, timeout=2)
        now = round(time.monotonic() - kill, 1)
        if not health or health[-1][1] != status:
            health.append([now, status])
        watch.poll()
        if server_exit is None and engine.process.poll() is not None:
            server_exit = {"at_s": now, "returncode": engine.process.returncode}
            if unit is not None:
                break  # what follows is the unit's restart, with the clients still sending
        time.sleep(0.5)
    others_after = {str(s): (p is not None and faults.alive(p)) for s, p in others.items()}
    restart = None
    if unit is not None:
        restart = restart_unit(unit, engine, pipeline, model, kill, server_exit, window, deadline, health, watch)
        # A client's own request (256 tokens) after the relaunch, answered in full: what a user sees come back.
        restart["clients_first_ok_s"] = faults.first_client_ok(
            load, kill, restart.get("relaunched_s"), EST["clients_after"], deadline or float("inf"))
    open_at_end = load.stop()
    hanging = load.still_open(kill)
    watch.poll()
    marks = [("kill", 0.0), ("server exit", (server_exit or {}).get("at_s"))]
    if restart:
        marks += [("relaunched", restart.get("relaunched_s")), ("health 200", restart.get("health_200_s")),
                  ("first ok", restart.get("first_ok_s"))]
    view = faults.client_view(load.snapshot(), kill, marks, open_at_end)
    record = {"stage": stage, "killed_pid": pid, "window_s": window, "other_stages_alive_after": others_after,
              **view, "still_open_at_end": hanging, "health": health, "server_exit": server_exit,
              "log_lines": watch.seen, "log_offset": log_offset}
    if restart is not None:
        record["restart"] = restart
    return record


def restart_unit(unit: faults.Unit, engine, pipeline: dict, model: str, kill: float, server_exit: dict | None,
                 window: float, deadline: float | None, health: list, watch: faults.LogWatch) -> dict:
    """What Restart=always does after the main process exited: leftovers stopped, RestartSec, the same start."""
    settings = unit.settings
    out: dict = {"unit": {k: settings[k] for k in ("Restart", "RestartSec", "TimeoutStopSec")}}
    if server_exit is None:
        out["skipped"] = (f"the API server did not exit within {window:.0f} s: Restart= restarts a unit only when "
                          "its main process exits, so nothing would have restarted it")
        return out
    code = server_exit["returncode"]
    restarts = settings["Restart"] == "always" or (settings["Restart"] == "on-failure" and code != 0) \
        or (settings["Restart"] == "on-success" and code == 0)
    out["server_exit_s"] = server_exit["at_s"]
    out["leftovers"] = unit.stop_leftovers()
    out["leftovers_gone_s"] = round(time.monotonic() - kill, 2)
    if not restarts:
        out["skipped"] = f"Restart={settings['Restart']} does not restart a unit whose main process exited with {code}"
        return out
    need = settings["RestartSec"] + EST["ready"] + EST["check"]
    if deadline is not None and deadline - time.monotonic() < need:
        out["skipped"] = (f"the relaunch would not fit: about {need:.0f} s needed, "
                          f"{deadline - time.monotonic():.0f} s left in --budget")
        return out
    relaunch_at = time.monotonic() + settings["RestartSec"]
    while time.monotonic() < relaunch_at:
        watch.poll()
        time.sleep(min(0.5, max(0.0, relaunch_at - time.monotonic())))
    offset = len(engine.text())
    engine.start()
    out["relaunched_s"] = round(time.monotonic() - kill, 2)
    serving.log(f"fault: relaunched the unit's argv at +{out['relaunched_s']} s (RestartSec={settings['RestartSec']})")
    again = faults.serve_again(pipeline, model, kill, deadline or (time.monotonic() + 600),
                               lambda: engine.text()[offset:], "restart", health=health)
    out.update(again)
    out["ready_after_relaunch_s"] = (round(again["health_200_s"] - out["relaunched_s"], 2)
                                     if again.get("health_200_s") is not None else None)
    out["stage_pids_after"] = {str(s["id"]): faults.stage_pid(engine, s["id"], since=offset) for s in pipeline["stages"]}
    serving.log(f"fault: serving again: {json.dumps({k: out.get(k) for k in ('health_200_s', 'first_ok_s')})}")
    return out


# --- one render -------------------------------------------------------------------------------


def bench(name: str, render: Path, work: Path, logs: Path, spec: dict, ready_timeout: float,
          fault_stage: int | None = None, fault_window: float = 60, fault_after: float = 8,
          restart: bool = False, run_grid: bool = True, deadline: float | None = None) -> dict:
    plan = json.loads((render / "plan.json").read_text())
    record: dict = {"scenario": name, "layout": plan["layout"], "connector": plan["backend"].get("kv_connector")}
    cap = osl_cap(plan)
    if run_grid and cap is not None and max(spec["output_lens"]) > cap:
        record["warning"] = (f"output length {max(spec['output_lens'])} > the final stage's max_tokens {cap}: "
                             f"vLLM-Omni 0.26 stops PD at {cap} tokens whatever the harness asks")
    pipeline = serving.lay_out(render, plan)
    record["gpus"] = pipeline["gpus"]
    venv = serving.make_venv(Path(pipeline["paths"]["venv"]))
    serving.fresh_home(plan["paths"]["engine_home"])
    serving.install_connector(plan, venv["purelib"])
    engine = serving.Engine(pipeline, name, logs, plan["paths"]["engine_home"])
    (host, _unused), = plan["hosts"].items()
    unit = faults.Unit(engine, faults.unit_settings(render / host / "systemd" / "vllm-omni@.service")) if restart else None
    engine.start()
    mine = work / name
    mine.mkdir(parents=True, exist_ok=True)
    try:
        record["ready"] = engine.wait_ready(ready_timeout)
        serving.log(f"{name}: ready={record['ready']}")
        if not record["ready"]["ready"]:
            return record
        with urllib.request.urlopen(pipeline["url"] + "/metrics", timeout=30) as response:  # noqa: S310
            (work / f"metrics-{name}.prom").write_bytes(response.read())
        if run_grid:
            run_harness(name, plan, pipeline, engine, spec, mine, logs, record)
            if "bench_error" in record:
                return record
            # After load: the histograms and the cross-stage transfer series carry observations now.
            with urllib.request.urlopen(pipeline["url"] + "/metrics", timeout=30) as response:  # noqa: S310
                (work / f"metrics-{name}-after-load.prom").write_bytes(response.read())
        record["after"] = engine.alive()
        if fault_stage is not None and plan["layout"] == "pd":
            need = est_fault(fault_window, fault_after, restart, unit.settings["RestartSec"] if unit else 15)
            left = (deadline - time.monotonic()) if deadline is not None else float("inf")
            if left < need:
                record["fault"] = {"stage": fault_stage, "skipped": f"about {need:.0f} s needed, {left:.0f} s left "
                                                                    "in --budget: run it in the next call"}
            else:
                record["fault"] = fault(engine, pipeline, plan, fault_stage, fault_window, fault_after, unit, deadline)
                (logs / f"{name}-fault.log").write_text(engine.text()[record["fault"].pop("log_offset", 0):])
        return record
    finally:
        engine.stop()


def run_harness(name: str, plan: dict, pipeline: dict, engine, spec: dict, mine: Path, logs: Path, record: dict) -> None:
    """`vllm bench serve` per grid cell, then the bench tool's normalize and report (plots where matplotlib is)."""
    grid = grid_cells(spec)
    (mine / "grid.json").write_text(json.dumps(grid))
    env = {**engine.env, "OPENAI_API_KEY": serving.API_KEY, "HF_HUB_OFFLINE": "1"}
    results = []
    record["cells_seconds"] = []
    for index, cell in enumerate(grid):
        argv = [str(Path(pipeline["paths"]["venv"]) / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
                "--base-url", pipeline["url"], "--endpoint", "/v1/chat/completions", "--model", plan["model"],
                "--served-model-name", plan["served_model_name"], "--tokenizer", plan["model"],
                "--dataset-name", "random", "--random-input-len", str(cell["input_len"]),
                "--random-output-len", str(cell["output_len"]), "--num-prompts", str(cell["num_prompts"]),
                "--max-concurrency", str(cell["concurrency"]), "--ignore-eos", "--disable-tqdm",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                "--save-result", "--result-dir", str(mine), "--result-filename", f"cell-{index}.json"]
        if {"talker", "code2wav"} & {stage["role"] for stage in pipeline["stages"]}:
            # Text out, as from the text-only pipelines it is compared with (vLLM-Omni 0.30's aggregated Qwen3-Omni
            # always has the talker; 0.26's text-only pipelines have none, and its bench had no --extra-body).
            argv += ["--extra-body", json.dumps({"modalities": ["text"]})]
        started = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=900)
        (logs / f"{name}-bench-{index}.log").write_text(done.stdout + done.stderr)
        seconds = round(time.monotonic() - started, 1)
        record["cells_seconds"].append(seconds)
        serving.log(f"{name}: cell {cell} rc={done.returncode} in {seconds:.0f} s")
        results.append(str(mine / f"cell-{index}.json"))
        if done.returncode != 0:
            record["bench_error"] = done.stderr[-2000:]
            return
    subprocess.run([sys.executable, str(BENCH), "normalize", "--grid", str(mine / "grid.json"), "--out",
                    str(mine / "raw.json"), *[f"--vllm-result={path}" for path in results]], check=True)
    meta = {"deployment_id": plan["deployment_id"], "label": name,
            "url": pipeline["url"] + " (engine port; no front door here)",
            "backend": "engine", "simulator": False, "engine": plan["engine"]["vllm_omni_version"],
            "layout": plan["layout"], "model": plan["served_model_name"], "pipelines": 1,
            "gpus": len(set(pipeline["gpus"])), "harness": "vllm",
            "harness_note": "vllm bench serve from the staged engine venv, random dataset, lengths in tokens, EOS ignored",
            "bench_host": "device", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (mine / "meta.json").write_text(json.dumps(meta, indent=1))
    subprocess.run([sys.executable, str(BENCH), "report", "--raw", str(mine / "raw.json"), "--meta",
                    str(mine / "meta.json"), "--out", str(mine)], check=True, capture_output=True)
    record["report"] = json.loads((mine / "report.json").read_text())["cells"]


# --- the call ---------------------------------------------------------------------------------


def estimate(items: list[tuple[str, dict]], spec: dict, fault_stage: int | None, fault_window: float,
             fault_after: float, restart: bool, run_grid: bool, bytecode: bool) -> dict:
    """The call's steps and their estimated seconds (EST), from each render's plan."""
    steps = [("compile bytecode", EST["bytecode"])] if bytecode else []
    for name, plan in items:
        steps.append((f"{name}: lay out, start, ready", EST["setup"] + EST["ready"] + EST["metrics"]))
        if run_grid:
            steps.append((f"{name}: grid of {len(grid_cells(spec))} cells", est_grid(spec) + EST["report"] + EST["metrics"]))
        if fault_stage is not None and plan["layout"] == "pd":
            steps.append((f"{name}: kill stage {fault_stage}" + (", restart, serve again" if restart else ""),
                          est_fault(fault_window, fault_after, restart)))
        steps.append((f"{name}: stop", EST["stop"]))
    return {"steps": [{"step": s, "seconds": round(t)} for s, t in steps], "total_s": round(sum(t for _s, t in steps))}


def load_plan(render: str) -> dict:
    """A render's plan.json; for --estimate on the controller, /srv/stage/render/NAME is
    $DEVICE_RENDER_ROOT/NAME (default .device/extras/render/NAME, where prepare.sh renders)."""
    root = Path(os.environ.get("DEVICE_RENDER_ROOT", serving.REPO / ".device" / "extras" / "render"))
    for candidate in (Path(render), root / Path(render).name):
        if (candidate / "plan.json").exists():
            return json.loads((candidate / "plan.json").read_text())
    raise SystemExit(f"no plan.json in {render} (nor in {root / Path(render).name}: run prepare.sh)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="+", help="NAME=RENDER_DIR")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--ready-timeout", type=float, default=420)
    parser.add_argument("--spec", default=json.dumps(DEFAULT_SPEC))
    parser.add_argument("--compile-bytecode", action="store_true",
                        help="compileall the staged packages and the machine's first, as a venv build does")
    parser.add_argument("--fault", type=int, default=None, metavar="STAGE",
                        help="after a PD render's grid, kill -9 this stage id's engine process under load")
    parser.add_argument("--fault-window", type=float, default=60)
    parser.add_argument("--fault-after", type=float, default=8, help="seconds of load before the kill")
    parser.add_argument("--restart-after-fault", action="store_true",
                        help="once the API server exited, restart it as the unit's Restart=always would, and time it")
    parser.add_argument("--no-grid", action="store_true", help="no harness: start, (fault,) stop")
    parser.add_argument("--budget", type=float, default=570, help="seconds this call may take (the tool stops at 600)")
    parser.add_argument("--estimate", action="store_true", help="print the steps and their estimated seconds only")
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.budget
    spec = json.loads(args.spec)
    items = [item.partition("=")[::2] for item in args.scenarios]
    if args.estimate:
        plans = [(name, load_plan(render)) for name, render in items]
        plan_out = estimate(plans, spec, args.fault, args.fault_window, args.fault_after, args.restart_after_fault,
                            not args.no_grid, args.compile_bytecode)
        plan_out["fits"] = plan_out["total_s"] <= args.budget
        for name, plan in plans:
            cap = osl_cap(plan)
            if not args.no_grid and cap is not None and max(spec["output_lens"]) > cap:
                plan_out.setdefault("warnings", []).append(f"{name}: output length {max(spec['output_lens'])} > "
                                                           f"decode's max_tokens {cap}")
        print(json.dumps(plan_out))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = serving.STAGE / "bench-work"
    logs = serving.STAGE / "bench-logs"
    for folder in (work, logs):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    call: dict = {"budget_s": args.budget, "spec": spec, "argv": sys.argv[1:]}
    document: dict = {"call": call, "renders": []}
    if args.compile_bytecode:
        call["bytecode"] = serving.compile_bytecode()
    plans = [(name, json.loads((Path(render) / "plan.json").read_text())) for name, render in items]
    call["estimate"] = estimate(plans, spec, args.fault, args.fault_window, args.fault_after, args.restart_after_fault,
                                not args.no_grid, args.compile_bytecode)
    render_need = EST["setup"] + EST["ready"] + EST["metrics"] + EST["stop"] + \
        (0 if args.no_grid else est_grid(spec) + EST["report"] + EST["metrics"])
    try:
        for index, ((name, render), (_same, plan)) in enumerate(zip(items, plans, strict=True)):
            left = deadline - time.monotonic()
            if left < render_need:
                document["renders"].append({"scenario": name, "layout": plan["layout"],
                                            "skipped": f"about {render_need:.0f} s needed, {left:.0f} s left in --budget"})
                continue
            # A fault (and its restart) may use only what the renders still to come leave over: the grids first.
            reserve = render_need * (len(items) - index - 1)
            document["renders"].append(bench(name, Path(render), work, logs, spec, args.ready_timeout, args.fault,
                                             args.fault_window, args.fault_after, args.restart_after_fault,
                                             not args.no_grid, deadline - reserve))
            write_back(out, work, logs, document, started)
        compare(document, work, out)
    finally:
        write_back(out, work, logs, document, started)
    for problem in serving.check_out(out):
        serving.log(f"WARNING: {problem}")
    return 0 if all(r.get("report") or (args.no_grid and r.get("ready", {}).get("ready")) for r in document["renders"]) \
        else 1


def compare(document: dict, work: Path, out: Path) -> None:
    """With two reports, the bench tool's compare (its markdown; the plots are made back on the controller)."""
    reports = [r["scenario"] for r in document["renders"] if r.get("report")]
    if len(reports) != 2:
        return
    done = subprocess.run([sys.executable, str(BENCH), "compare", "--report", str(out / reports[0] / "report.json"),
                           "--report", str(out / reports[1] / "report.json"), "--out", str(work / "compare")],
                          capture_output=True, text=True, check=False)
    markdown = work / "compare" / "compare.md"
    document["compare"] = {"a": reports[0], "b": reports[1], "rc": done.returncode,
                           "markdown": markdown.read_text() if markdown.exists() else done.stderr[-1000:]}
    print(document["compare"]["markdown"], flush=True)


def write_back(out: Path, work: Path, logs: Path, document: dict, started: float) -> None:
    """$OUT as the device tool returns it (module docstring), rewritten after each render so a call stopped at its
    limit still brings back what it finished."""
    document["call"]["elapsed_s"] = round(time.monotonic() - started, 1)
    for record in document["renders"]:
        report = work / record["scenario"] / "report.json"
        if report.exists():
            (out / record["scenario"]).mkdir(exist_ok=True)
            shutil.copyfile(report, out / record["scenario"] / "report.json")
    (out / "bench.json").write_text(json.dumps(document, indent=1, default=str))
    with tarfile.open(out / "bench-files.tar.gz", "w:gz") as archive:
        for path in sorted(work.rglob("*")):
            if path.is_file():
                archive.add(path, arcname=str(path.relative_to(work)))
    serving.pack_logs(logs, out / "logs.tar.gz", whole=tuple(p.name for p in logs.glob("*-fault.log")) +
                      tuple(p.name for p in logs.glob("*-bench-*.log")))


if __name__ == "__main__":
    sys.exit(main())
