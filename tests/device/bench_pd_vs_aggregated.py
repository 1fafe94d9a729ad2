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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pd_serving as serving

BENCH = serving.REPO / "roles" / "bench" / "files" / "vllm_omni_bench.py"


def bench(name: str, render: Path, out: Path, logs: Path, spec: dict, ready_timeout: float) -> dict:
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
        record["after"] = engine.alive()
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
    args = parser.parse_args()
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    records = []
    for item in args.scenarios:
        name, _sep, render = item.partition("=")
        records.append(bench(name, Path(render), out, logs, json.loads(args.spec), args.ready_timeout))
        (out / "bench.json").write_text(json.dumps(records, indent=1))
    return 0 if all(r.get("report") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
