"""Progress lines: a pull's (rsync's --info=progress2 output and the script's own notes) and a health
wait's (what the engine's journal says it is doing)."""

from __future__ import annotations

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._progress import (
    engine_phase,
    health_wait_line,
    latest,
    pause_before_next_look,
    plain_log_line,
    progress_line,
    venv_line,
)

RSYNC = ("\r              0   0%    0.00kB/s    0:00:00  \r    536,870,912  16%  255.98MB/s    0:00:10  "
         "\r  1,207,959,552  37%  310.52MB/s    0:00:06 (xfr#1, to-chk=2/5)")


def test_the_newest_rsync_line_gives_bytes_of_total_rate_and_time_left():
    line = progress_line("lab-2", "model-x", RSYNC, 3_221_225_472, 4.0)
    assert line == "lab-2: model-x: 1.21 of 3.22 GB (37%), 310.52MB/s, 0:00:06 left"


def test_without_a_total_the_line_still_says_how_far_it_got():
    assert progress_line("h", "a", RSYNC, None, 1.0) == "h: a: 1.21 GB (37%), 310.52MB/s, 0:00:06 left"


def test_the_scripts_own_note_is_shown_with_the_time_so_far():
    note = "checking 5 files (3.22 GB) against the manifest\n"
    assert progress_line("h", "a", note, 3_221_225_472, 12.4) == "h: a: checking 5 files (3.22 GB) against the manifest (12 s)"


def test_an_empty_file_says_nothing():
    assert progress_line("h", "a", "", 10, 1.0) is None
    assert latest("\r\n \r") == ""


# vLLM's own start-up lines (format strings from vLLM's sources, values from public logs), in order.
VLLM_START = [
    "\x1b[0;36m(EngineCore_DP0 pid=212)\x1b[0;0m INFO 10-06 12:00:01 [gpu_model_runner.py:2602] "
    "Starting to load model Qwen/Qwen3-Omni-30B-A3B-Instruct...",
    "Loading safetensors checkpoint shards:  50% Completed | 8/16 [00:10<00:10,  1.25s/it]",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:21 [default_loader.py:267] Loading weights took 20.31 seconds",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:22 [gpu_model_runner.py:2653] Model loading took 59.32 GiB and 21.02 seconds",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:30 [backends.py:548] Dynamo bytecode transform time: 7.1 s",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:35 [gpu_worker.py:298] Available KV cache memory: 52.10 GiB",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|████▌     | 5/11 [00:02<00:03,  1.9it/s]",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] Graph capturing finished in 8 secs, took 0.31 GiB",
    "(APIServer pid=1) INFO 10-06 12:00:41 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
]
PHASES = ["loading weights", "loading weights (50%)", "weights loaded, profiling memory",
          "weights loaded, profiling memory", "compiling (torch.compile)", "allocating the KV cache",
          "capturing CUDA graphs (mixed prefill-decode, PIECEWISE: 45%)", "engine initialised", "API server starting"]


@pytest.mark.parametrize("upto", range(len(VLLM_START)))
def test_the_newest_milestone_says_what_the_engine_does(upto):
    noise = ["(EngineCore_DP0 pid=212) WARNING 10-06 12:00:02 [utils.py:1] something unrelated"]
    assert engine_phase(VLLM_START[: upto + 1] + noise) == PHASES[upto]


def test_a_journal_without_milestones_has_no_phase():
    assert engine_phase([]) is None
    assert engine_phase(["xpyd-sim listening on 0.0.0.0:8091"]) is None


def test_the_progress_line_names_host_target_wait_answer_phase_and_newest_line():
    line = health_wait_line("lab-1", "omni0", 45.4, 1800, "/health: connection refused", VLLM_START[:2])
    assert line == ("lab-1/omni0: 45 s of 1800, /health: connection refused; loading weights (50%): "
                    "Loading safetensors checkpoint shards:  50% Completed | 8/16 [00:10<00:10,  1.25s/it]")
    plain = health_wait_line("lab-2", "router", 3, 120, "/readiness: HTTP 503", [VLLM_START[0]])
    assert plain.endswith("; loading weights: Starting to load model Qwen/Qwen3-Omni-30B-A3B-Instruct...")
    assert health_wait_line("h", "p", 1, 9, "x", []).endswith("; no journal lines yet")


def test_long_lines_are_cut():
    assert len(plain_log_line("INFO 10-06 12:00:00 [x.py:1] " + "y" * 500)) == 140


def test_a_venv_build_shows_its_step_then_bytes_of_the_unpacked_total_rate_and_time_left():
    assert venv_line("lab-1", "/opt/v", "", None, 1) is None
    notes = "expect 8000000000\ncreating the venv\n"
    assert venv_line("lab-1", "/opt/v", notes, 20_000, 2) == "lab-1: /opt/v: creating the venv (2 s)"
    notes += "installing 182 locked packages\n"
    assert venv_line("lab-1", "/opt/v", notes, 2_000_000_000, 20) == (
        "lab-1: /opt/v: installing 182 locked packages: 2.00 of 8.00 GB (25%), 100.0 MB/s, 0:01:00 left")
    assert venv_line("h", "/v", "installing 3 locked packages", 50_000_000, 10) == (
        "h: /v: installing 3 locked packages: 0.05 GB written, 5.0 MB/s (10 s)")
    assert venv_line("h", "/v", notes + "checking every pin\n", 8_100_000_000, 80) == "h: /v: checking every pin (80 s)"


EAGER_STAGE = ["loading weights", "weights loaded, profiling memory", "allocating the KV cache",
               "setting up the KV transfer (Mooncake)", "engine initialised"]
CAPTURE = ["capturing CUDA graphs (mixed prefill-decode, PIECEWISE: 100%)", "capturing CUDA graphs (decode, FULL: 100%)"]
COMPILED_STAGE = [*EAGER_STAGE[:2], "compiling (torch.compile)", "compiled, profiling memory", *EAGER_STAGE[2:4]]


def _phases_in_order(name: str) -> list[str]:
    from pathlib import Path

    log = Path(__file__).resolve().parents[3] / "fixtures/device-h200-startup" / name
    # Lines as journald keeps them: split at newlines only (a tqdm bar's carriage returns stay inside).
    lines = [line for line in log.read_bytes().decode().split("\n") if not line.startswith("# ")]
    seen = []
    for upto in range(len(lines)):
        phase = engine_phase(lines[: upto + 1])
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
    return seen


def test_a_real_pd_start_reads_as_its_stages_milestones_in_order():
    """The engine log of a real vLLM-Omni text PD start on an H200, eager (tests/fixtures/device-h200-startup)."""
    assert _phases_in_order("pd-text-start.log") == (
        [f"stage 0: {phase}" for phase in EAGER_STAGE] + [f"stage 1: {phase}" for phase in EAGER_STAGE]
        + ["API server starting"])


def test_a_compiled_start_shows_compilation_and_each_stages_cuda_graph_capture():
    """The same pipeline with torch.compile and CUDA graphs: the bars' newest update, under their stage's tag."""
    assert _phases_in_order("pd-text-compiled-start.log") == [
        f"stage {stage}: {phase}" for stage in (0, 1) for phase in COMPILED_STAGE + CAPTURE + ["engine initialised"]
    ] + ["API server starting"]


def test_a_tqdm_bar_reads_as_its_newest_update():
    tqdm_line = ("\x1b[0;36m(StageEngineCoreProc_stage1_replica0 pid=1059)\x1b[0;0m Capturing CUDA graphs"
                 " (decode, FULL):   0%|          | 0/11 [00:00<?, ?it/s]\rCapturing CUDA graphs (decode, FULL):"
                 "  55%|█████▍    | 6/11 [00:00<00:00, 11.17it/s]")
    assert engine_phase([tqdm_line]) == "stage 1: capturing CUDA graphs (decode, FULL: 55%)"
    assert plain_log_line(tqdm_line) == "Capturing CUDA graphs (decode, FULL):  55%|█████▍    | 6/11 [00:00<00:00, 11.17it/s]"


def test_health_looks_start_a_second_apart_and_slow_to_the_delay_never_past_the_timeout():
    # A service up after 2 s is seen at the second look, not after the 5 s delay.
    assert [pause_before_next_look(elapsed, 5, 1800) for elapsed in (0.3, 2.0, 8.0, 20.0, 600.0)] == [1.0, 1.0, 2.0, 5.0, 5.0]
    assert pause_before_next_look(1799.5, 5, 1800) == 0.5
    assert pause_before_next_look(1801, 5, 1800) == 0.0
    assert pause_before_next_look(0.0, 0.5, 1800) == 0.5  # a delay under a second is kept as given
