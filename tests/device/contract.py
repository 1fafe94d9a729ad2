"""Does a pipeline keep the OpenAI contract? The client's sampling fields against what the engine answers, on a GPU.

Run on the device machine by ``tests/device/pd_serving.sh contract NAME=RENDER...`` (after the payload is staged,
as for ``run``), each render laid out and started as ``tests/device/pd_serving.py`` does (the collection's engine
plugin installed from the plan), one after the other. Per pipeline, with non-streamed requests:

* **lengths**: ``max_tokens`` 1, 7 and 64 with ``ignore_eos`` must give exactly that many completion tokens (chat),
  and a request that sets no ``max_tokens`` the stage default of the stage that writes
  the answer (read from the rendered stage config);
* **greedy**: 32 different prompts at temperature 0, ``ignore_eos``, 24 tokens each; the texts are kept;
* **sampled**: the same prompts at temperature 1 with a seed each (a random-weight model's greedy answer may not
  depend on the prompt at all; a seeded sample follows the logits, so it shows whether two pipelines' differ);
* **seeds**: temperature 1, seed 1 twice and seed 2: the same seed must repeat its answer, two seeds must differ;
* **refusals**: ``n`` 2 and temperature 3 must be the client's HTTP 400;
* on PD, every request must have gone prefill -> KV transfer -> decode (the collection's judge over the log).

Then the greedy and the sampled answers of every pair of pipelines are compared prompt by prompt: how many are
equal, how many distinct answers each gave, and for each that differs, the first character where they part.
``/v1/completions`` is sent once and recorded (vLLM-Omni refuses it for Qwen3-Omni).
``results.json`` holds it all, ``verdicts`` the pass/fail lines.
``--bench-spec JSON`` then runs the bench harness's grid (bench_pd_vs_aggregated.py) on each pipeline while it is up, so
one start serves both; its files come back as bench-files.tar.gz.
``--budget`` (seconds) skips what would not fit and says so. Standard library only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pd_vs_aggregated as harness
import pd_serving as serving

LENGTHS = (1, 7, 64)
GREEDY_PROMPTS = [f"Question {i}: name {('a colour', 'a city', 'an animal', 'a number')[i % 4]} and say why, "
                  f"in the style of report {i * 7 % 13}." for i in range(32)]
GREEDY_TOKENS = 24
STARTUP_ESTIMATE_S = 170  # the tiny model's eager PD start on an H200 took 106-158 s (runs 6-9)


def request(pipeline: dict, model: str, path: str, fields: dict, request_id: str, timeout: float = 120) -> dict:
    """One non-streamed request: status, completion tokens, text (or the error)."""
    body = {"model": model, "request_id": request_id, **fields}
    if path == "/v1/chat/completions":
        body.setdefault("messages", [{"role": "user", "content": "Tell me about the sea."}])
        body["modalities"] = ["text"]
    status, raw = serving.http("POST", pipeline["url"] + path, body, timeout=timeout)
    answer = {"request_id": request_id, "status": status}
    try:
        document = json.loads(raw)
    except ValueError:
        return {**answer, "error": raw.decode(errors="replace")[:300]}
    if status != 200:
        return {**answer, "error": str(document.get("message") or document.get("error") or document)[:300]}
    choice = (document.get("choices") or [{}])[0]
    text = choice.get("text") if "text" in choice else (choice.get("message") or {}).get("content")
    return {**answer, "completion_tokens": (document.get("usage") or {}).get("completion_tokens"),
            "finish_reason": choice.get("finish_reason"), "text": text}


def answer_stage_default_max_tokens(pipeline: dict, pd: bool) -> int | None:
    """The default max_tokens of the stage that writes the answer (decode in PD, else the first stage), as rendered.

    Both schemas list the stages as top-level "- stage_id: N" items (0.30's per-platform overrides are indented);
    in PD the decode stage is the second (0.26 marks it is_decode_only, 0.30's registered pipeline by its place).
    """
    text = Path(pipeline["paths"]["stage_config"]).read_text()
    stages = text.split("\n- stage_id: ")
    writer = stages[2] if pd else stages[1]
    for line in writer.splitlines():
        if line.strip().startswith("max_tokens:"):
            return int(line.split(":", 1)[1])
    return None


def contract(pipeline: dict, model: str, name: str, engine: serving.Engine, pd: bool) -> dict:
    prefix = f"{serving._pd_evidence.CHECK_REQUEST_PREFIX}-{name}"
    chat, completions = "/v1/chat/completions", "/v1/completions"
    out: dict = {"lengths": {}, "verdicts": []}
    for count in LENGTHS:
        fields = {"max_tokens": count, "ignore_eos": True, "temperature": 0}
        out["lengths"][f"chat_{count}"] = request(pipeline, model, chat, fields, f"{prefix}-len{count}")
    # vLLM-Omni answers Qwen3-Omni on /v1/completions with 400 ("requires chat template structure"): recorded only.
    out["completions"] = request(pipeline, model, completions, {
        "prompt": "Tell me about the sea.", "max_tokens": 7, "ignore_eos": True, "temperature": 0}, f"{prefix}-cmpl7")
    default = answer_stage_default_max_tokens(pipeline, pd)
    out["lengths"]["stage_default"] = {**request(pipeline, model, chat, {"ignore_eos": True}, f"{prefix}-default"),
                                       "expected": default}
    out["greedy"] = [request(pipeline, model, chat, {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": GREEDY_TOKENS, "ignore_eos": True,
        "temperature": 0, "seed": 0}, f"{prefix}-greedy{i}") for i, prompt in enumerate(GREEDY_PROMPTS)]
    # Sampled with a seed per prompt: a random-weight model's greedy answer can ignore the prompt (the tiny model's
    # did), a sampled one follows the logits, so two pipelines agree here only if their KV and logits do.
    out["sampled"] = [request(pipeline, model, chat, {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": GREEDY_TOKENS, "ignore_eos": True,
        "temperature": 1.0, "top_p": 1.0, "seed": 100 + i}, f"{prefix}-sampled{i}") for i, prompt in enumerate(GREEDY_PROMPTS)]
    seeded = {"max_tokens": GREEDY_TOKENS, "ignore_eos": True, "temperature": 1.0, "top_p": 1.0}
    out["seeds"] = {label: request(pipeline, model, chat, {**seeded, "seed": seed}, f"{prefix}-{label}")
                    for label, seed in (("seed1", 1), ("seed1_again", 1), ("seed2", 2))}
    out["refusals"] = {"n_2": request(pipeline, model, chat, {"n": 2, "max_tokens": 4}, f"{prefix}-n2"),
                       "temperature_3": request(pipeline, model, chat, {"temperature": 3.0, "max_tokens": 4},
                                                f"{prefix}-t3")}
    verdicts = out["verdicts"]
    for count in LENGTHS:
        got = out["lengths"][f"chat_{count}"].get("completion_tokens")
        verdicts.append([f"chat max_tokens {count} -> {got} tokens", got == count])
    got = out["lengths"]["stage_default"].get("completion_tokens")
    verdicts.append([f"no max_tokens -> {got} tokens (stage default {default})", got == default])
    greedy_ok = [r for r in out["greedy"] if r["status"] == 200 and r.get("completion_tokens") == GREEDY_TOKENS]
    verdicts.append([f"greedy: {len(greedy_ok)} of {len(out['greedy'])} answered with {GREEDY_TOKENS} tokens",
                     len(greedy_ok) == len(out["greedy"])])
    sampled_ok = [r for r in out["sampled"] if r["status"] == 200 and r.get("completion_tokens") == GREEDY_TOKENS]
    verdicts.append([f"sampled: {len(sampled_ok)} of {len(out['sampled'])} answered with {GREEDY_TOKENS} tokens",
                     len(sampled_ok) == len(out["sampled"])])
    out["distinct_answers"] = {kind: len({r.get("text") for r in out[kind]}) for kind in ("greedy", "sampled")}
    texts = {label: answer.get("text") for label, answer in out["seeds"].items()}
    verdicts.append(["seed 1 twice: the same answer", texts["seed1"] is not None and texts["seed1"] == texts["seed1_again"]])
    verdicts.append(["seeds 1 and 2: different answers", None not in texts.values() and texts["seed1"] != texts["seed2"]])
    for label, answer in out["refusals"].items():
        verdicts.append([f"{label}: HTTP {answer['status']}", answer["status"] == 400])
    if pd:
        text = engine.text()
        # Chat completions all: the judge knows a chat completion's transfer id (xfer-chatcmpl-<id>-...).
        sent = [*out["lengths"].values(), *out["greedy"], *out["sampled"], *out["seeds"].values()]
        ids = [answer["request_id"] for answer in sent]
        through = [rid for rid in ids if serving._pd_evidence.judge(text, rid)["ok"]]
        out["through_prefill_and_decode"] = {"requests": len(ids), "ok": len(through)}
        verdicts.append([f"PD: {len(through)} of {len(ids)} went prefill -> KV transfer -> decode",
                         len(through) == len(ids)])
    return out


def scenario(name: str, render: Path, logs: Path, ready_timeout: float, bench: dict | None = None,
             keep_compile_cache: bool = False) -> dict:
    plan = json.loads((render / "plan.json").read_text())
    pipeline = serving.lay_out(render, plan)
    venv = serving.make_venv(Path(pipeline["paths"]["venv"]))
    serving.fresh_home(plan["paths"]["engine_home"], plan["backend"]["compile_cache"] if keep_compile_cache else None)
    pd = plan["layout"] == "pd"
    record: dict = {"scenario": name, "layout": plan["layout"], "stages": [s["role"] for s in pipeline["stages"]],
                    "connector": serving.install_connector(plan, venv["purelib"]),
                    "engine_plugin": plan["backend"].get("engine_plugin"), "argv": pipeline["argv"]}
    engine = serving.Engine(pipeline, name, logs, plan["paths"]["engine_home"])
    serving.log(f"{name}: starting ({len(pipeline['stages'])} stages)")
    engine.start()
    try:
        record["ready"] = engine.wait_ready(ready_timeout)
        serving.log(f"{name}: ready={record['ready']}")
        if record["ready"]["ready"]:
            started = time.monotonic()
            record["contract"] = contract(pipeline, plan["served_model_name"], name, engine, pd)
            record["contract_s"] = round(time.monotonic() - started, 1)
            record["plugin_lines"] = [line[:240] for line in engine.text().splitlines()
                                      if "vllm_omni_serve engine plugin" in line][:6]
            for verdict, ok in record["contract"]["verdicts"]:
                serving.log(f"{name}: {'PASS' if ok else 'FAIL'} {verdict}")
            if bench and time.monotonic() + bench["need_s"] < bench["deadline"]:
                # The bench grid on the pipeline already up: one start serves both (a start is most of a call).
                mine = bench["work"] / name
                mine.mkdir(parents=True, exist_ok=True)
                harness.run_harness(name, plan, pipeline, engine, bench["spec"], mine, logs, record)
            elif bench:
                record["bench_skipped"] = f"about {bench['need_s']:.0f} s needed, less left in --budget"
        record["failure_lines"] = serving.evidence(engine, pipeline, {}, False)["failure_lines"]
        return record
    finally:
        engine.stop()


def first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def compare(results: dict, names: list[str]) -> dict:
    """Greedy and seeded-sampled answers of every two pipelines that served, prompt by prompt."""
    served = [n for n in names if (results.get(n) or {}).get("contract")]
    pairs = {}
    for first, second in itertools.combinations(served, 2):
        for kind in ("greedy", "sampled"):
            a, b = results[first]["contract"][kind], results[second]["contract"][kind]
            differing = [{"prompt": i, "first_char": first_difference(x.get("text") or "", y.get("text") or ""),
                          first: x.get("text"), second: y.get("text")}
                         for i, (x, y) in enumerate(zip(a, b, strict=False)) if x.get("text") != y.get("text")]
            pairs[f"{first} vs {second}, {kind}"] = {
                "prompts": len(a), "equal": len(a) - len(differing), "differing": differing,
                "distinct_answers": [len({r.get("text") for r in a}), len({r.get("text") for r in b})]}
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="+", help="NAME=RENDER_DIR")
    parser.add_argument("--out", default="/tmp/out")
    parser.add_argument("--ready-timeout", type=float, default=300)
    parser.add_argument("--budget", type=float, default=570, help="seconds this call may take")
    parser.add_argument("--keep-compile-cache", action="store_true",
                        help="keep the plan's compile cache from the previous start (0.30 compiles Triton kernels at "
                             "each start; a later pipeline of the same engine then starts on what an earlier compiled)")
    parser.add_argument("--bench-spec", type=json.loads, metavar="JSON",
                        help="after the contract, the bench harness's grid on each pipeline (bench_pd_vs_aggregated.py's spec)")
    args = parser.parse_args()
    out, logs = Path(args.out), serving.STAGE / "logs"
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    results: dict = {"machine": serving.nvidia_smi("--query-gpu=name,memory.total,driver_version",
                                                   "--format=csv,noheader"), "skipped": []}
    names = []
    for spec in args.scenarios:
        name, _sep, render = spec.partition("=")
        left = args.budget - (time.monotonic() - began)
        if left < STARTUP_ESTIMATE_S + 60:
            results["skipped"].append(f"{name}: {left:.0f} s left of the budget, a start and the requests need "
                                      f"about {STARTUP_ESTIMATE_S + 60} s")
            continue
        names.append(name)
        bench = args.bench_spec and {"spec": args.bench_spec, "need_s": harness.est_grid(args.bench_spec),
                                     "deadline": began + args.budget, "work": out / "bench"}
        results[name] = scenario(name, Path(render), logs, min(args.ready_timeout, left - 60), bench,
                                 args.keep_compile_cache)
        results[name]["compile_cache_kept"] = args.keep_compile_cache
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    results["compared"] = compare(results, names)
    results["verdicts"] = [f"{name}: {'PASS' if ok else 'FAIL'} {verdict}" for name in names
                           for verdict, ok in (results[name].get("contract") or {}).get("verdicts", [])]
    results["verdicts"] += [f"{pair}: answers equal on {c['equal']} of {c['prompts']} prompts "
                            f"({c['distinct_answers']} distinct answers)" for pair, c in results["compared"].items()]
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    if (out / "bench").is_dir():  # the grids' files, as bench_pd_vs_aggregated.py returns them
        with tarfile.open(out / "bench-files.tar.gz", "w:gz") as archive:
            archive.add(out / "bench", arcname=".")
        shutil.rmtree(out / "bench")
    serving.pack_logs(logs, out / "logs.tar.gz", whole=tuple(p.name for p in logs.glob("*-bench-*.log")))
    for line in results["verdicts"] + results["skipped"]:
        serving.log(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
