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
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from testlib import REPO, load_ansible_inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._planner import ENGINE_HOME, build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._render import render_tree


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_CLEANUP: list[Path] = []


def request_cleanup(path: Path) -> None:
    _CLEANUP.append(path)


@pytest.fixture(scope="module", autouse=True)
def _remove_roots():
    yield
    for path in _CLEANUP:
        shutil.rmtree(path, ignore_errors=True)


def stand_in_device(tmp: Path, name: str) -> tuple[dict, Path, dict]:
    """The device machine's layout with the stand-in engine: the pd-text render (its roots under /srv, removed
    after), /srv/stage as the payload would unpack it, and the environment the device scripts read."""
    if os.geteuid() != 0:
        pytest.skip(f"the plan's engine home {ENGINE_HOME} needs root (CI runs as root)")
    # The plan's roots may not live in /tmp (anyone could plant them there): a directory of our own, removed after.
    roots = Path(f"/srv/vllm-omni-serve-{name}-{os.getpid()}")
    request_cleanup(roots)
    plan = build_plan(load_ansible_inventory(REPO / "tests" / "device" / "inventories" / "pd-text.yml", extra_vars={
        "vllm_omni_install_root": str(roots / "opt"), "vllm_omni_config_root": str(roots / "etc"),
        "vllm_omni_hf_home": str(roots / "hf"), "vllm_omni_api_port_base": free_port(),
        "vllm_omni_bootstrap_port_base": free_port()}))
    render = tmp / "render"
    for path, text in render_tree(plan).items():
        (render / path).parent.mkdir(parents=True, exist_ok=True)
        (render / path).write_text(text)
    stage = tmp / "stage"
    (stage / "lib").mkdir(parents=True)
    os.symlink(REPO / "tests" / "fixtures" / "fake_engine", stage / "site")
    (tmp / "torch").mkdir()
    env = {**os.environ, "DEVICE_STAGE": str(stage), "DEVICE_TORCH_SITE": str(tmp / "torch"),
           "PYTHONUNBUFFERED": "1"}
    return plan, render, env


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


def test_bench_and_fault_rehearsal(tmp_path):
    """tests/device/bench_pd_vs_aggregated.py on the stand-in: the grid through `vllm bench serve`, /metrics
    before and after load, and --fault 0 (the prefill stage's process killed under load), all written to
    bench.json, before any device minute is spent on it."""
    _unused, render, env = stand_in_device(tmp_path, "rehearsal-bench")
    out = tmp_path / "out"
    spec = {"input_lens": [16], "output_lens": [4], "concurrency": [1, 2], "prompts_min": 2, "prompts_per_concurrency": 1}
    run = subprocess.run([sys.executable, str(REPO / "tests" / "device" / "bench_pd_vs_aggregated.py"), "--out", str(out),
                          "--ready-timeout", "60", "--spec", json.dumps(spec), "--fault", "0", "--fault-window", "4",
                          "--fault-after", "2", f"pd={render}"],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record, = json.loads((out / "bench.json").read_text())
    assert [(c["concurrency"], c["completed"], c["failed"]) for c in record["report"]] == [(1, 2, 0), (2, 2, 0)]
    for name in ("metrics-pd.prom", "metrics-pd-after-load.prom"):
        assert "vllm:num_requests_running" in (out / name).read_text()
    fault = record["fault"]
    assert fault["stage"] == 0 and fault["killed_pid"] > 0 and fault["other_stages_alive_after"] == {"1": True}
    assert fault["completed_before_kill"] > 0
    # The stand-in fails requests and /health once a stage died; the device run measures what the real one does.
    assert fault["health"][-1][1] == 503 and fault["health"][-1][0] < 1.5 and fault["server_exit"] is None
    late = [r for r in fault["after_kill"] if r["started_s"] >= 0.5]  # the stand-in notices within 0.2 s
    assert late and all(r["status"] == 500 for r in late)
    assert "stage 0 engine died" in (out / "logs" / "pd-fault.log").read_text()
    assert "log_offset" not in fault
