"""A rehearsal of the real-GPU run script (tests/device/pd_serving.py) without a GPU.

Device minutes are few and a machine is given back 30 s after a call: a bug in the script must not
be found there. A stand-in engine (tests/fixtures/fake_engine: answers /health and streamed chat
completions, enforces the key, logs the collection connector's hand-off lines, dies like stock
vLLM-Omni PD when the stage config names vLLM's own connector) runs from the device inventory's
real render, laid out where the plan says, through the same venv/launcher set-up the device gets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from devicelib import stand_in_device
from testlib import REPO, load_ansible_inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("device")
    plan, render, env = stand_in_device(tmp, "rehearsal")
    out = tmp / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "pd_serving.py"), "--out", str(out),
                          "--ready-timeout", "60", f"pd={render}", f"stock={render}:stock"],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return plan, json.loads((out / "results.json").read_text()), out


def test_pd_scenario_serves_measures_and_judges_every_request(rehearsal):
    plan, results, out = rehearsal
    pd = results["pd"]
    assert pd["ready"]["ready"] is True
    assert pd["argv"] == plan["hosts"]["h200-device"]["pipelines"][0]["argv"]
    assert pd["connector"].endswith("vllm_omni_serve_kv.py") and Path(pd["connector"]).is_file()
    for group, count in (("short", 10), ("long", 10), ("concurrent4", 12)):
        summary = pd["summary"][group]
        assert (summary["requests"], summary["ok"], summary["failed"]) == (count, count, 0)
        assert summary["tokens"] == 32 * count and summary["ttft_ms"]["p50"] > 0 and summary["itl_ms"]["p50"] > 0
    assert pd["evidence"]["requests_through_prefill_and_decode"] == pd["evidence"]["requests_judged"] == 32
    assert pd["evidence"]["kv_tokens_received"]["requests"] >= 32
    assert pd["requests"]["without_key"]["status"] == 401
    assert pd["requests"]["eos_first_token"]["status"] == 200
    assert pd["after"] == {"process_running": True, "health": 200}
    assert (out / "logs.tar.gz").stat().st_size > 0


def test_stock_connector_control_shows_the_engine_dying(rehearsal):
    _unused, results, _unused = rehearsal
    stock = results["stock"]
    assert stock["connector"] == "vLLM MooncakeConnector (stock)"
    assert stock["requests"]["first"]["status"] == 500
    assert stock["after"]["health"] == 503
    assert any("Missing prefill kv_transfer_params.remote_request_id" in line
               for line in stock["evidence"]["failure_lines"])


def test_nixl_render_runs_through_the_same_scenario_and_reports_its_own_ports(tmp_path):
    """The pd-text-nixl render (vllm_omni_kv_connector: nixl) through the same device script: the stand-in
    serves, the judge reads the same hand-off lines, and the evidence looks for NIXL's ports, not Mooncake's."""
    plan, render, env = stand_in_device(tmp_path, "rehearsal-nixl", "pd-text-nixl")
    pipeline = plan["hosts"]["h200-device"]["pipelines"][0]
    assert plan["backend"]["kv_connector"]["class"] == "ServeNixlConnector"
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "pd_serving.py"), "--out", str(out),
                          "--ready-timeout", "60", f"nixl={render}"],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    nixl = json.loads((out / "results.json").read_text())["nixl"]
    assert nixl["evidence"]["requests_through_prefill_and_decode"] == nixl["evidence"]["requests_judged"] == 32
    assert "bootstrap_query" not in nixl["evidence"] and "mooncake_ports_listening" not in nixl["evidence"]
    assert nixl["evidence"]["ucx_environment"] == {
        "UCX_TCP_PORT_RANGE": pipeline["environment"]["UCX_TCP_PORT_RANGE"], "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"}
    assert isinstance(nixl["evidence"]["nixl_side_channels_listening"], list)


def test_excerpt_trims_a_device_run_into_a_fixture(tmp_path):
    """tests/device/excerpt.py: per-token gaps become a count, every error line stays, hand-offs once per kind."""
    import tarfile

    run = tmp_path / "files_at"
    run.mkdir()
    request = {"request_id": "r", "ttft_s": 0.123456789, "itl_s": [0.04] * 31, "text": "x" * 500, "status": 200}
    (run / "results.json").write_text(json.dumps({"machine": "H200", "pd-text": {"requests": {"short": [request]}}}))
    log = tmp_path / "pd-text.tail.log"
    handoff = "vllm_omni.serve PD prefill handed off transfer_id=xfer-chatcmpl-vllm-omni-serve-check-pd-text-short{}-ab"
    log.write_text("\n".join([
        "\x1b[0;36m(APIServer pid=1)\x1b[0;0m Launching Orchestrator thread with 2 stages",
        *(handoff.format(i) for i in range(5)),
        "noise",
        "(APIServer pid=1) ERROR 12-01 RuntimeError: [Orchestrator][PD] Missing prefill kv_transfer_params.remote_request_id",
    ]))
    with tarfile.open(run / "logs.tar.gz", "w:gz") as archive:
        archive.add(log, arcname=log.name)
    dest = tmp_path / "fixture"
    done = subprocess.run([sys.executable, str(REPO / "tests/device/excerpt.py"), str(run), str(dest)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    trimmed = json.loads((dest / "results.json").read_text())["pd-text"]["requests"]["short"][0]
    assert trimmed == {"request_id": "r", "ttft_s": 0.1235, "status": 200, "itl_count": 31}
    lines = (dest / "log-excerpts.txt").read_text().splitlines()
    assert lines[0].startswith("===== pd-text (8 lines")
    assert "\x1b" not in "".join(lines)
    assert sum("handed off" in line for line in lines) == 1  # five short-prompt hand-offs, one kept
    assert any("Missing prefill kv_transfer_params.remote_request_id" in line for line in lines)
    assert "noise" not in lines


def test_excerpt_keeps_each_process_log_of_a_span_run_under_its_heading(tmp_path):
    """A span call's logs are one per process (span-omni-span0, span-omni-span0-decode0): both are read, each under
    its heading; a hand-off line is kept once per process."""
    import tarfile

    run = tmp_path / "files_at"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"machine": "H100", "span": {"scenario": "span"}}))
    with tarfile.open(run / "logs.tar.gz", "w:gz") as archive:
        for name, line in (("span-omni-span0", "(APIServer pid=9) ERROR EngineDeadError: errored=True"),
                           ("span-omni-span0-decode0", "[OmniMasterServer] PD decode received KV transfer_id=x")):
            log = tmp_path / f"{name}.tail.log"
            log.write_text(f"{line}\nnoise\n{line}\n")
            archive.add(log, arcname=log.name)
    dest = tmp_path / "fixture"
    done = subprocess.run([sys.executable, str(REPO / "tests/device/excerpt.py"), str(run), str(dest)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = (dest / "log-excerpts.txt").read_text().splitlines()
    assert lines[0].startswith("===== span (")
    assert [line for line in lines if line.startswith("## ")] == ["## span-omni-span0", "## span-omni-span0-decode0"]
    assert sum("EngineDeadError" in line for line in lines) == 2  # every error line
    assert sum("received KV" in line for line in lines) == 1 and "noise" not in lines


def test_sandbox_emulation_accounts_for_every_directive_of_the_engine_unit(tmp_path):
    """tests/device/sandbox.py: each [Service] directive of the rendered engine unit is emulated or named as not."""
    sys.path.insert(0, str(REPO / "tests" / "device"))
    try:
        import sandbox
    finally:
        sys.path.remove(str(REPO / "tests" / "device"))
    plan = build_plan(load_ansible_inventory(REPO / "tests" / "device" / "inventories" / "pd-text.yml"))
    unit = render_tree(plan)["h200-device/systemd/vllm-omni@.service"]
    path = tmp_path / "vllm-omni@.service"
    path.write_text(unit)
    wanted = sandbox.directives(path)
    assert wanted["User"] == ["vllm-omni"] and wanted["ProtectSystem"] == ["strict"]
    unknown = set(wanted) - sandbox.EMULATED - sandbox.NOT_SANDBOX - set(sandbox.NOT_EMULATED)
    assert not unknown, f"the engine unit has directives tests/device/sandbox.py neither emulates nor lists: {unknown}"


def device_files(out: Path) -> dict[str, str]:
    """What the device tool would bring back from $OUT, checked against its limits (at most 8 files, 2 folders
    down, 16 MiB each): a script that writes more loses results on the device, so the rehearsal fails."""
    sys.path.insert(0, str(REPO / "tests" / "device"))
    try:
        import pd_serving
    finally:
        sys.path.remove(str(REPO / "tests" / "device"))
    assert pd_serving.check_out(out) == []
    return {str(p.relative_to(out)): p for p in out.rglob("*") if p.is_file()}


def tar_members(path: Path) -> dict[str, str]:
    import tarfile

    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read().decode(errors="replace") for m in archive.getmembers() if m.isfile()}


@pytest.fixture(scope="module")
def bench_rehearsal(tmp_path_factory):
    """One call as the device gets it: PD and aggregated with one spec, then PD's decode stage (stage 1) killed
    under load and the pipeline restarted as the unit's Restart=always would."""
    tmp = tmp_path_factory.mktemp("bench")
    _unused, render, env = stand_in_device(tmp, "rehearsal-bench")
    _unused, aggregated, _unused = stand_in_device(tmp, "rehearsal-bench", "aggregated-text")
    out = tmp / "out"
    spec = {"input_lens": [16], "output_lens": [4], "concurrency": [1, 2], "prompts_min": 2, "prompts_per_concurrency": 1}
    run = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "bench_pd_vs_aggregated.py"), "--out", str(out),
                          "--ready-timeout", "60", "--spec", json.dumps(spec), "--fault", "1", "--fault-window", "30",
                          "--fault-after", "2", "--restart-after-fault", f"pd={render}", f"agg={aggregated}"],
                         env={**env, "FAKE_ENGINE_EXIT_AFTER_S": "2"}, capture_output=True, text=True, timeout=400,
                         check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads((out / "bench.json").read_text()), out, run.stdout


def test_bench_runs_both_renders_with_one_spec_and_compares_them(bench_rehearsal):
    document, out, stdout = bench_rehearsal
    pd, agg = document["renders"]
    for record in (pd, agg):
        assert [(c["concurrency"], c["completed"], c["failed"]) for c in record["report"]] == [(1, 2, 0), (2, 2, 0)]
    assert (pd["layout"], agg["layout"]) == ("pd", "aggregated")
    assert document["compare"]["rc"] == 0 and "| 16 | 4 | 2 | TTFT p50 ms |" in document["compare"]["markdown"]
    files = device_files(out)
    assert set(files) == {"bench.json", "pd/report.json", "agg/report.json", "bench-files.tar.gz", "logs.tar.gz"}
    # what compare needs, back on the controller: the two report.json files as they are
    compare = subprocess.run([sys.executable, str(REPO / "roles/bench/files/vllm_omni_bench.py"), "compare",
                              "--report", str(out / "pd/report.json"), "--report", str(out / "agg/report.json"),
                              "--out", str(out.parent / "compare")], capture_output=True, text=True, check=False)
    assert compare.returncode == 0, compare.stderr
    members = tar_members(files["bench-files.tar.gz"])
    for name in ("pd", "agg"):
        assert {f"{name}/raw.json", f"{name}/meta.json", f"{name}/report.md", f"{name}/grid.json"} <= set(members)
        assert "vllm:num_requests_running" in members[f"metrics-{name}.prom"]
        assert "vllm:num_requests_running" in members[f"metrics-{name}-after-load.prom"]
    estimate = document["call"]["estimate"]
    assert [s["step"] for s in estimate["steps"]][:3] == [
        "pd: lay out, start, ready", "pd: grid of 2 cells", "pd: kill stage 1, restart, serve again"]
    assert "fault" not in agg  # an aggregated render has no stage to kill
    assert "Compare: pd vs agg" in stdout


def test_fault_of_the_decode_stage_and_the_restart_as_restart_always(bench_rehearsal):
    """kill -9 of stage 1 under load: the stand-in exits 0 as the real engine did for stage 0 (run 7); the script
    stops what is left of the unit, waits RestartSec (15 s, read from the rendered unit), starts the same argv,
    and times /health 200 and the first chat completion answered in full, judged prefill -> decode."""
    document, out, _unused = bench_rehearsal
    fault = document["renders"][0]["fault"]
    assert fault["stage"] == 1 and fault["killed_pid"] > 0 and fault["other_stages_alive_after"] == {"0": False}
    assert fault["completed_before_kill"] > 0
    assert fault["server_exit"]["returncode"] == 0 and 1.5 < fault["server_exit"]["at_s"] < 4
    restart = fault["restart"]
    assert restart["unit"] == {"Restart": "always", "RestartSec": 15.0, "TimeoutStopSec": 120.0}
    assert restart["leftovers"]["sigkill"] == []
    assert restart["relaunched_s"] >= restart["server_exit_s"] + 15
    assert restart["relaunched_s"] < restart["health_200_s"] <= restart["first_ok_s"] < restart["relaunched_s"] + 20
    assert restart["relaunched_s"] < restart["clients_first_ok_s"] < restart["relaunched_s"] + 20
    assert restart["judged"]["ok"], restart["judged"]
    assert restart["ready_after_relaunch_s"] >= 1  # the stand-in's start-up second
    assert set(restart["stage_pids_after"]) == {"0", "1"} and all(restart["stage_pids_after"].values())
    assert fault["killed_pid"] not in restart["stage_pids_after"].values()
    # what clients saw, phase by phase: refused while the server was down, ok again after the relaunch
    phases = {p["from"]: p for p in fault["phases"]}
    assert list(phases) == ["kill", "server exit", "relaunched", "health 200", "first ok"]
    assert set(phases["server exit"]["outcomes"]) == {"refused"}
    assert "ok" in phases["first ok"]["outcomes"] or "ok" in phases["health 200"]["outcomes"]
    outcomes = [r["outcome"] for r in fault["runs"]]
    assert "refused" in outcomes and outcomes[-1] == "ok"
    assert any(r["outcome"] in ("http 500", "cut stream") for r in fault["runs"])
    assert fault["health"][0][1] in (200, None) and fault["health"][-1][1] == 200
    assert any(h[1] is None for h in fault["health"])
    assert fault["log_lines"]["engine: server finished"]["at_s"] < restart["relaunched_s"]
    logs = tar_members(out / "logs.tar.gz")
    assert "is dead: EngineDeadError" in logs["pd-fault.log"] and "===== launch 2" in logs["pd-fault.log"]
    assert "log_offset" not in fault and fault["still_open_at_end"] == []


def test_bench_budget_skips_what_would_not_fit(tmp_path):
    """--budget: a step whose estimate does not fit is skipped and said so, not started and killed at 600 s."""
    _unused, render, env = stand_in_device(tmp_path, "rehearsal-budget")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "bench_pd_vs_aggregated.py"), "--out", str(out),
                          "--budget", "100", f"pd={render}"], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 1
    record, = json.loads((out / "bench.json").read_text())["renders"]
    assert record["skipped"].startswith("about ") and "left in --budget" in record["skipped"]
    estimate = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "bench_pd_vs_aggregated.py"),
                               "--estimate", "--fault", "1", "--restart-after-fault", f"pd={render}", f"agg={render}"],
                              env=env, capture_output=True, text=True, timeout=60, check=False)
    plan = json.loads(estimate.stdout)
    assert plan["fits"] is False and plan["total_s"] > 570  # two grids and a restart do not fit one call
    alone = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "bench_pd_vs_aggregated.py"),
                            "--estimate", "--spec", json.dumps({"input_lens": [512], "output_lens": [64],
                                                                "concurrency": [1], "prompts_min": 1,
                                                                "prompts_per_concurrency": 1}), f"pd={render}"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(alone.stdout)["warnings"] == ["pd: output length 64 > decode's max_tokens 32"]


# --- a pipeline spanning two inventory hosts on one machine (tests/device/span_serving.py) ------------

# The stand-in's timeouts, scaled down (the real ones: heartbeat 5 s, heartbeat timeout 30 s, dispatch wait 10 s,
# the API server's exit 5 s after a stage died, the head's orchestrator join on SIGTERM 30 s): RestartSec stays the
# rendered unit's 15 s.
FAKE_SPAN = {"FAKE_ENGINE_HEARTBEAT_S": "0.5", "FAKE_ENGINE_HEARTBEAT_TIMEOUT_S": "3", "FAKE_ENGINE_DISPATCH_WAIT_S": "1",
             "FAKE_ENGINE_EXIT_AFTER_S": "2", "FAKE_ENGINE_HEAD_STOP_JOIN_S": "3"}


def in_private_network(argv: list[str]) -> list[str]:
    """argv in a network namespace of its own with lo up: the span script adds two addresses to lo, which must
    not touch this (shared) machine's network, and the plan's fixed ports are free there."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs unshare(1) and ip(8) for a private network namespace")
    if subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot create a network namespace here (needs CAP_SYS_ADMIN)")
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def waited_at_least(earlier: float, later: float, seconds: float) -> bool:
    """Whether LATER is at least SECONDS after EARLIER. The rehearsal reports times rounded to 0.01 s, and in floats
    ``5.49 + 15`` is 20.490000000000002, above a relaunch reported at 20.49 that came exactly 15 s later."""
    return round(later - earlier, 2) >= seconds


def span_run(tmp: Path, name: str, extra: list[str], env_extra: dict) -> tuple[dict, Path, str]:
    _unused, render, env = stand_in_device(tmp, name, "pd-span-text", ports=False)
    out = tmp / "out"
    run = subprocess.run(in_private_network([sys.executable, str(REPO / "tests" / "device" / "span_serving.py"),
                                             "--out", str(out), "--ready-timeout", "60", "--budget", "150", *extra,
                                             f"span={render}"]),
                         env={**env, **FAKE_SPAN, **env_extra}, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    return json.loads((out / "results.json").read_text())["span"], out, run.stdout


@pytest.fixture(scope="module")
def span_head_lives(tmp_path_factory):
    """kill -9 of the headless unit's main process; the head lives on (what vLLM-Omni's code suggests)."""
    return span_run(tmp_path_factory.mktemp("span"), "rehearsal-span", ["--kill", "main"], {})


@pytest.fixture(scope="module")
def span_head_exits(tmp_path_factory):
    """kill -9 of the headless engine-core process, and a head that shuts down once no decode replica is left."""
    return span_run(tmp_path_factory.mktemp("span-head"), "rehearsal-span-head", ["--kill", "engine"],
                    {"FAKE_ENGINE_HEAD_EXITS_ON_PEER_LOSS": "1"})


@pytest.fixture(scope="module", params=["natural", "bounded"])
def span_restart(tmp_path_factory, request):
    """A restart in the deploy's order with the head's stop watched: by itself, or SIGKILL once its HTTP is done."""
    span, _out, _stdout = span_run(tmp_path_factory.mktemp(f"span-{request.param}"), f"rehearsal-{request.param}",
                                   ["--restart", request.param], {})
    return request.param, span


def test_span_restart_in_the_deploys_order_times_the_heads_stop_and_serves_again(span_restart):
    mode, span = span_restart
    restart = span["restart"]
    assert restart["mode"] == mode and restart["timeout_stop_sec"] == 120 and "fault" not in span
    (headless,) = restart["headless_stop"]
    assert headless["all_exited_s"] < 2 and "sigkill_s" not in headless and "listener_closed_s" not in headless
    head = restart["head_stop"]
    # The stand-in's head stops listening at once and exits only after its (scaled) 3 s orchestrator join.
    assert head["listener_closed_s"] <= head["http_done_s"] < 1, head
    assert "log: server finished" in head["log_lines"] and "log: orchestrator shutdown" in head["log_lines"]
    if mode == "natural":
        assert 3 <= head["main_exited_s"] < 5 and "sigkill_s" not in head, head
        assert "log: orchestrator join timed out" in head["log_lines"]
    else:
        assert head["sigkill_s"] == head["http_done_s"] and head["sigkill_because"] == "the HTTP server is done"
        assert head["all_exited_s"] < 2 and "log: orchestrator join timed out" not in head["log_lines"], head
    assert restart["headless_stop"][0]["all_exited_s"] <= restart["head_stop_began_s"] <= restart["stopped_s"]
    assert restart["start"]["stagger_s"] is not None and restart["ready_again"]["ready"]
    again = restart["served_again"]
    assert again["outcome"] == "ok" and again["judged"]["ok"], again


def test_span_inventory_plans_one_pipeline_over_two_hosts_of_one_gpu():
    """tests/device/inventories/pd-span-text.yml: the head (prefill) on h200-a, a headless decode on h200-b, each
    on GPU 0, private addresses (loopback is refused for hosts that must reach each other)."""
    plan = build_plan(load_ansible_inventory(REPO / "tests" / "device" / "inventories" / "pd-span-text.yml"))
    a, b = plan["hosts"]["h200-a"]["pipelines"], plan["hosts"]["h200-b"]["pipelines"]
    assert [(p["name"], p["process"], p["stage_id"], p["gpus"]) for p in a + b] == [
        ("omni-span0", "head", 0, [0]), ("omni-span0-decode0", "headless", 1, [0])]
    assert b[0]["master"] == {"address": "10.213.77.11", "port": 8400} and "--headless" in b[0]["argv"]
    assert a[0]["environment"]["VLLM_PORT"] == b[0]["environment"]["VLLM_PORT"] == "20000"  # the script moves b's
    assert set(plan["host_platforms"].values()) == {"ubuntu2404"}  # build_payload.py --check-renders needs this


def test_span_serves_through_head_and_headless_judged_from_both_logs(span_head_lives):
    span, out, _unused = span_head_lives
    assert span["addresses"] == {"10.213.77.11": "added", "10.213.77.12": "added"}
    assert span["one_machine_env"] == {"omni-span0-decode0": {"VLLM_PORT": "20064"}}  # the next ZMQ slice
    assert span["ready"]["ready"] and span["ready"]["headless_running"] == [True]
    assert span["start"]["stagger_s"] is not None  # the headless start waited for the prefill's KV cache
    assert span["start"]["headless_started_after_head_s"][0] >= span["start"]["stagger_s"] > 0  # the deploy's order
    assert span["stopped"] == ["omni-span0-decode0", "omni-span0"]  # headless first, then the head
    assert span["registrations"] == ["[OmniMasterServer] Stage 1 replica 0 registered from host 10.213.77.12"]
    assert {"10.213.77.11:8091", "10.213.77.11:8400"} <= set(span["listening"]["head"])
    assert span["judged"]["requests"] == span["judged"]["through_prefill_and_decode"] == 16
    assert "StageEngineCoreProc_stage1" in span["judged"]["example"]["decode"][0]  # the receipt: the headless log
    for group in ("one_at_a_time", "concurrent4"):
        assert span["summary"][group]["ok"] == span["summary"][group]["requests"] == 8
    assert set(device_files(out)) == {"results.json", "logs.tar.gz"}
    logs = tar_members(out / "logs.tar.gz")
    assert set(logs) == {"span-omni-span0.tail.log", "span-omni-span0-decode0.tail.log"}
    assert '"VLLM_PORT"' in logs["span-omni-span0-decode0.tail.log"].splitlines()[1]  # the env names, no values
    assert "===== launch 2" in logs["span-omni-span0-decode0.tail.log"]


def test_span_headless_killed_head_waits_and_the_restarted_stage_registers(span_head_lives):
    """The head lives on: requests in flight hang until the heartbeat timeout detaches the dead replica, new ones
    fail after the dispatch wait; the headless unit restarts after RestartSec, registers again, serves."""
    fault = span_head_lives[0]["fault"]
    # The head's /health answers 200 from the first look after the kill to the end (the look's time after the kill
    # is the machine's: 0.0 s on a quiet one, 0.2 s seen with make test's lab beside it).
    assert fault["kill"] == "main" and fault["head_exited"] is False
    assert [status for _seconds, status in fault["health"]] == [200] and fault["health"][0][0] < 2.0, fault["health"]
    assert fault["headless_exit_s"] < 1 and fault["headless_returncode"] == -9
    assert len(fault["headless_leftovers"]["leftovers"]) == 1 and fault["headless_leftovers"]["sigkill"] == []
    assert 2.5 < fault["head_detached_dead_replica_s"] < 6  # the scaled 3 s heartbeat timeout
    assert fault["relaunches"] == [["headless", fault["headless_relaunched_s"]]]
    assert waited_at_least(fault["headless_exit_s"], fault["headless_relaunched_s"], 15)  # RestartSec
    assert fault["headless_relaunched_s"] < fault["registered_again_s"] < fault["first_ok_s"]
    assert fault["first_ok_judged"]["ok"], fault["first_ok_judged"]
    assert fault["clients_first_ok_s"] is not None
    # Requests in flight at the kill, or sent in the second after it (the clients' requests are short: about one run
    # in two, the kill lands as one ends and the next is sent 0.01 s after it), hang until the (scaled 3 s)
    # heartbeat timeout detaches the dead replica: none of them fails fast.
    early = [r for r in fault["in_flight_at_kill"] + fault["after_kill"] if r["kind"] == "client" and r["started_s"] < 1]
    hung = [r for r in early if r["outcome"] == "stream error"]
    assert hung and all(r["ended_s"] > 2 for r in hung), early
    examples = {r["example"] for r in fault["runs"] if r["outcome"] == "stream error"}
    assert "stream error: stage replica disappeared" in examples
    assert fault["runs"][-1]["outcome"] == "ok"
    assert fault["still_open_at_end"] == [] and fault["client_requests_still_open_at_end"] == 0
    assert fault["order"][1].endswith("headless unit started again (Restart=always after RestartSec)")


def test_span_head_exits_too_and_comes_back_in_the_deploys_order(span_head_exits):
    fault = span_head_exits[0]["fault"]
    assert fault["kill"] == "engine" and fault["head_exited"] is True and fault["head_returncode"] == 0
    assert fault["headless_returncode"] == 0  # the headless process shut down cleanly after its engine core died
    assert fault["headless_exit_s"] < fault["head_exit_s"]
    (first, at_head), (second, at_headless) = fault["relaunches"]
    assert (first, second) == ("head", "headless") and at_head <= at_headless
    assert waited_at_least(fault["head_exit_s"], at_head, 15)  # the head unit's RestartSec
    assert at_headless < fault["registered_again_s"] < fault["first_ok_s"]
    assert fault["first_ok_judged"]["ok"], fault["first_ok_judged"]  # the fault's own error lines do not count
    assert "(the deploy's order)" in fault["order"][-1]
    phases = {p["from"]: p for p in fault["phases"]}
    assert set(phases["head exit"]["outcomes"]) == {"refused"}
    assert any(h[1] is None for h in fault["health"]) and fault["health"][-1][1] == 200


def test_netlink_adds_and_removes_an_address_on_lo(tmp_path):
    """span_serving.netlink_address (no iproute2 on the device): in a private network namespace, an address
    appears on lo, can be bound, and is gone after the removal."""
    code = ("import sys; sys.path.insert(0, 'tests/device'); import span_serving as s; "
            "ip = '10.213.77.99'; a = s.is_local(ip); r1 = s.netlink_address(ip, add=True); b = s.is_local(ip); "
            "r2 = s.add_addresses([ip]); r3 = s.netlink_address(ip, add=False); c = s.is_local(ip); "
            "print(a, r1, b, r2[ip], r3, c)")
    done = subprocess.run(in_private_network([sys.executable, "-c", code]), cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert done.stdout.split() == ["False", "added", "True", "present", "removed", "False"], done.stderr


def test_prepare_prints_the_call_sequence_with_estimates_that_fit(tmp_path):
    """tests/device/prepare.sh --calls: the staging calls back to back (one per payload part, the last with the
    extras and the unpack), then A (PD and aggregated, one spec), B (span), C (decode killed, restart) and D and E
    (span restarts in the deploy's order, the head's stop natural and bounded) and F (the kill with the self-heal
    agents), each with timeout_s 600, A-E with an estimate inside the 570 s budget, from the renders prepare.sh
    makes."""
    root = tmp_path / "render"
    for name in ("pd-text", "aggregated-text", "pd-span-text"):
        plan = build_plan(load_ansible_inventory(REPO / "tests" / "device" / "inventories" / f"{name}.yml"))
        for path, text in render_tree(plan).items():
            (root / name / path).parent.mkdir(parents=True, exist_ok=True)
            (root / name / path).write_text(text)
    done = subprocess.run([str(REPO / "tests" / "device" / "prepare.sh"), "--calls"], cwd=REPO, capture_output=True,
                          text=True, check=False, env={**os.environ, "DEVICE_RENDER_ROOT": str(root)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    parts = json.loads((REPO / "tests" / "device" / "payload.json").read_text())["parts"]
    staging = [line for line in lines if "pd_serving.sh stage" in line]
    assert len(staging) == len(parts) and "extras.tar.gz" in staging[-1] and "imports pd-text=" in staging[-1]
    calls = {line.split(".", 1)[0].strip(): line for line in lines
             if line.startswith(("  A.", "  B.", "  C.", "  D.", "  E.", "  F."))}
    assert set(calls) == set("ABCDEF") and all(line.endswith("timeout_s 600") for line in calls.values())
    assert "--self-heal 5" in calls["F"] and "span=/srv/stage/render/pd-span-text" in calls["F"]
    assert "pd-text=/srv/stage/render/pd-text aggregated-text=/srv/stage/render/aggregated-text" in calls["A"]
    assert """--spec '{"input_lens": [512], "output_lens": [32],""" in calls["A"]
    assert "span=/srv/stage/render/pd-span-text" in calls["B"]
    assert "--fault 1" in calls["C"] and "--restart-after-fault" in calls["C"] and "--no-grid" in calls["C"]
    estimates = [int(n) for n in re.findall(r"\(about (\d+) s", done.stdout)]
    assert "--restart natural" in calls["D"] and "--restart bounded" in calls["E"]
    assert len(estimates) == 5 and all(300 < n <= 570 for n in estimates), estimates


def test_a_warm_restart_keeps_only_the_plans_compile_cache_of_the_engine_home(tmp_path):
    """pd_serving.py empties the engine home before every start; --keep-compile-cache keeps the plan's compile cache
    (what a host's unit keeps across restarts), and nothing else but the model cache."""
    sys.path.insert(0, str(REPO / "tests" / "device"))
    try:
        import pd_serving
    finally:
        sys.path.remove(str(REPO / "tests" / "device"))
    home = tmp_path / "home"
    for path in ("hf/model", "compile-cache/vllm-omni-0.26.0/vllm/model", ".triton/cache/x", "stray"):
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text("x")
    cache = str(home / "compile-cache" / "vllm-omni-0.26.0")
    pd_serving.fresh_home(str(home), keep_compile_cache=cache)
    assert sorted(p.name for p in home.iterdir()) == ["compile-cache", "hf"]
    assert (home / "compile-cache" / "vllm-omni-0.26.0" / "vllm" / "model").is_file()
    pd_serving.fresh_home(str(home))
    assert sorted(p.name for p in home.iterdir()) == ["hf"]


def test_span_self_heal_brings_back_a_pipeline_whose_head_errs_for_good(tmp_path):
    """The device's run 9 scenario with the hosts' self-heal agents (span_serving.py --self-heal): the stand-in's head
    errs for good once its only decode replica is gone (/health 503, requests HTTP 500, a new registration never
    answered), as vLLM-Omni 0.26's did on the GPU. The head's agent restarts the head; the stage registers with the
    new one; the pipeline answers in full again, judged, with no person and no deploy."""
    span, _out, stdout = span_run(tmp_path, "rehearsal-heal", ["--kill", "main", "--self-heal", "1"],
                                  {"FAKE_ENGINE_HEAD_ERRS_ON_PEER_LOSS": "1", "FAKE_ENGINE_REGISTRATION_TIMEOUT_S": "5"})
    fault = span["fault"]
    heal = fault["self_heal"]
    assert heal["interval_s"] == 1
    first = heal["restarts"][0]
    assert first["process"] == "head" and "HTTP 503" in first["why"], heal["restarts"]
    # The head's restart stops it as its unit's ExecStop= does, watched: bounded, not the engine's 30 s join.
    assert first["stop"]["all_exited_s"] < 10 and "listener_closed_s" in first["stop"], first
    assert [h for h in fault["health"] if h[1] == 503], fault["health"]  # the head erred before it was restarted
    assert first["at_s"] > next(h[0] for h in fault["health"] if h[1] == 503)
    assert fault["first_ok_s"] is not None and fault["first_ok_judged"]["ok"], fault
    assert fault["first_ok_s"] > first["started_s"]
    assert "self-heal: restarted vllm-omni@omni-span0.service" in stdout
