"""The rolling upgrade's helpers: requests in flight from /metrics samples, and an engine.env without its secrets."""

from __future__ import annotations

import pytest
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _upgrade

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3-omni"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen3-omni"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3-omni"} 2.0
vllm:num_requests_waiting{engine="1",model_name="qwen3-omni"} 0.0
vllm:num_requests_swapped{engine="0",model_name="qwen3-omni"} 50.0
vllm:num_requests_running_total 99
process_open_fds 17.0
"""

ENV_HEAD = 'CUDA_VISIBLE_DEVICES="0,1,2"\nVLLM_PORT="20000"\n'


def test_running_and_waiting_requests_of_every_engine_are_summed():
    assert _upgrade.requests_in_flight(VLLM_METRICS) == 6


def test_a_drained_pipeline_reads_zero():
    drained = "vllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\n"
    assert _upgrade.requests_in_flight(drained) == 0


def test_the_simulators_active_requests_count():
    assert _upgrade.requests_in_flight("# TYPE xpyd_sim_active_requests gauge\nxpyd_sim_active_requests 4\n") == 4


@pytest.mark.parametrize(("line", "count"), [
    ("vllm:num_requests_running 5", 5),
    ("vllm:num_requests_running{} 5", 5),
    ("  vllm:num_requests_running 5  ", 5),
    ("vllm:num_requests_running\t7.0", 7),
    ("vllm:num_requests_running 1e1", 10),
    ("vllm:num_requests_running +2", 2),
    ("vllm:num_requests_running NaN", 0),
])
def test_a_sample_line_is_read_in_the_exposition_forms(line, count):
    assert _upgrade.requests_in_flight(line + "\n") == count


def test_windows_line_endings_are_read():
    assert _upgrade.requests_in_flight("vllm:num_requests_running 2\r\nvllm:num_requests_waiting 1\r\n") == 3


def test_a_fractional_total_is_cut_to_a_whole_count():
    assert _upgrade.requests_in_flight("vllm:num_requests_running 1.5\nvllm:num_requests_waiting 0.25\n") == 1


@pytest.mark.parametrize("metrics", [
    "",
    "process_open_fds 17.0\n",
    "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n",
    "vllm:num_requests_running_total 3\nvllm:num_requests_swapped 2\n",
    "vllm:num_requests_running three\n",
    "<html>502 Bad Gateway</html>",
])
def test_metrics_without_any_in_flight_sample_are_refused_rather_than_read_as_drained(metrics):
    with pytest.raises(ValueError) as caught:
        _upgrade.requests_in_flight(metrics)
    assert str(caught.value) == ("/metrics shows none of vllm:num_requests_running, vllm:num_requests_waiting, "
                                 "xpyd_sim_active_requests: cannot tell when the pipeline is drained")


def test_a_waiting_sample_alone_is_enough_to_tell():
    assert _upgrade.requests_in_flight("vllm:num_requests_waiting 0\n") == 0


def test_an_env_file_without_the_secrets_block_is_unchanged():
    assert _upgrade.strip_secrets(ENV_HEAD) == ENV_HEAD
    assert _upgrade.strip_secrets("") == ""


def test_the_secrets_block_is_cut_at_its_marker_line():
    installed = ENV_HEAD + _upgrade.SECRETS_MARKER + '\nVLLM_API_KEY="s3cret"\nHF_TOKEN="hf_x"\n'
    assert _upgrade.strip_secrets(installed) == ENV_HEAD


def test_the_marker_text_without_its_line_end_is_not_cut():
    text = ENV_HEAD + _upgrade.SECRETS_MARKER
    assert _upgrade.strip_secrets(text) == text


def test_only_the_first_marker_cuts_and_everything_after_it_goes():
    marker = _upgrade.SECRETS_MARKER + "\n"
    assert _upgrade.strip_secrets(ENV_HEAD + marker + "A=1\n" + marker + "B=2\n") == ENV_HEAD


def test_the_marker_is_the_line_the_engine_role_writes():
    lines = (REPO / "roles" / "engine" / "templates" / "secrets.env.j2").read_text().splitlines()
    assert _upgrade.SECRETS_MARKER in lines


def test_samples_with_a_timestamp_or_a_closing_brace_in_a_label_value_are_counted():
    metrics = ('vllm:num_requests_running{model_name="a}b"} 3 1700000000000\n'
               'vllm:num_requests_waiting{model_name="q\\"x"} 2\n')
    assert _upgrade.requests_in_flight(metrics) == 5


@pytest.mark.parametrize("value", [".", "-", "+Inf"])
def test_a_value_that_is_no_count_is_skipped_not_a_traceback(value):
    with pytest.raises(ValueError, match="shows none of"):
        _upgrade.requests_in_flight(f"vllm:num_requests_running {value}\n")
