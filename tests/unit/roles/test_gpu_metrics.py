"""GPU health metrics: the plan's gpu_metrics section (which hosts run the exporter, for which GPUs, its port,
firewall rule, unit sandbox, alert rules) and the exporter itself (roles/engine/files/vllm_omni_gpu_metrics.py)
against nvidia-smi -q -x outputs captured on real GPU hosts and kernel-log Xid lines. The lab runs it under
systemd with the GPU stand-in, scraped by Prometheus (tests/lab/test_footprint.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml
from testlib import REPO
from unitlib import inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _prometheus
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

spec = importlib.util.spec_from_file_location("vllm_omni_gpu_metrics",
                                              REPO / "roles" / "engine" / "files" / "vllm_omni_gpu_metrics.py")
exporter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exporter)

H200X2 = (REPO / "tests" / "fixtures" / "gpu" / "h200x2" / "nvidia-smi-q.xml").read_text()
LISTED = yaml.safe_load((REPO / "data" / "metrics.yml").read_text())["gpu"]["metrics"]
TEXT = {"vllm_omni_audio_output": False}
MIB = 1024 * 1024

# An older driver's layout (power_readings, ECC as single_bit/double_bit totals), one GPU with errors.
OLD_DRIVER = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>470.82.01</driver_version>
 <gpu id="00000000:3B:00.0">
  <product_name>Tesla V100-SXM2-32GB</product_name><uuid>GPU-0000-old</uuid>
  <fb_memory_usage><total>32510 MiB</total><used>31000 MiB</used><free>1510 MiB</free></fb_memory_usage>
  <utilization><gpu_util>87 %</gpu_util></utilization>
  <ecc_errors><volatile>
   <single_bit><device_memory>3</device_memory><total>5</total></single_bit>
   <double_bit><device_memory>1</device_memory><total>1</total></double_bit>
  </volatile></ecc_errors>
  <temperature><gpu_temp>71 C</gpu_temp></temperature>
  <power_readings><power_draw>250.12 W</power_draw><power_limit>300.00 W</power_limit></power_readings>
 </gpu>
</nvidia_smi_log>
"""


class Ran:
    def __init__(self, stdout: str, returncode: int = 0):
        self.stdout, self.returncode = stdout, returncode


def run_returning(*outputs, calls=None):
    """A subprocess.run stand-in answering each call with the next output (a Ran, or an exception to raise)."""
    answers = list(outputs)

    def run(argv, **kwargs):
        if calls is not None:
            calls.append(argv)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer
    return run


def config(tmp_path, gpus, **more) -> dict:
    return {"address": "127.0.0.1", "port": 0, "gpus": gpus, "nvidia_smi": "nvidia-smi-not-on-this-machine",
            "kernel_log": str(tmp_path / "kmsg"), "timeout_s": 20.0, "cache_s": 0.0, **more}


def samples(text: str) -> dict[str, dict[str, str]]:
    """{metric{labels}: value} of an exposition text, every sample line checked against data/metrics.yml."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):  # HELP and TYPE lines name listed metrics too
            assert line.split()[2] in LISTED, line
            continue
        name, _brace, rest = line.partition("{")
        if not rest:
            name, number = line.split()
            assert name in LISTED, f"{name} is not in data/metrics.yml's gpu section"
            found[name] = number
            continue
        labels, _end, number = rest.rpartition("} ")
        assert name in LISTED, f"{name} is not in data/metrics.yml's gpu section"
        keys = {pair.split("=", 1)[0] for pair in labels.split('",') if pair}
        assert keys <= set(LISTED[name]["labels"]) - {"host"}, (name, keys)  # host: Prometheus' target label
        found[f"{name}{{{labels}}}"] = number.strip()
    assert set(k.partition("{")[0] for k in found) <= set(LISTED)
    return found


def value(found: dict, metric: str, **labels) -> str:
    wanted = [k for k in found if k.partition("{")[0] == metric
              and all(f'{key}="{val}"' in k for key, val in labels.items())]
    assert len(wanted) == 1, (metric, labels, wanted)
    return found[wanted[0]]


# --- the exporter -----------------------------------------------------------------------------------


def test_the_h200_capture_is_read_per_gpu_with_its_exact_values(tmp_path):
    (tmp_path / "kmsg").write_text("")
    text = exporter.Exporter(config(tmp_path, [0, 1]), run=run_returning(Ran(H200X2))).metrics()
    found = samples(text)
    assert value(found, "vllm_omni_gpu_nvidia_smi_up") == "1"
    assert value(found, "vllm_omni_gpu_present", gpu="0", uuid="GPU-5192bdb2-d45a-1572-1297-509e99d0fce7",
                 bus_id="0000:00:06.0", name="NVIDIA H200") == "1"
    assert value(found, "vllm_omni_gpu_memory_total_bytes", gpu="0") == str(143771 * MIB)  # exact, not %g
    assert value(found, "vllm_omni_gpu_memory_used_bytes", gpu="1") == "0"
    assert value(found, "vllm_omni_gpu_temperature_celsius", gpu="0") == "37"
    assert value(found, "vllm_omni_gpu_temperature_celsius", gpu="1") == "38"
    assert value(found, "vllm_omni_gpu_power_watts", gpu="0") == "78.37"  # instant, not the average
    assert value(found, "vllm_omni_gpu_power_limit_watts", gpu="0") == "700"
    assert value(found, "vllm_omni_gpu_utilization_ratio", gpu="0") == "0"
    for kind in ("corrected", "uncorrected"):
        assert value(found, "vllm_omni_gpu_ecc_errors", gpu="1", kind=kind) == "0"
    assert value(found, "vllm_omni_gpu_row_remap_failed", gpu="0") == "0"
    assert value(found, "vllm_omni_gpu_remapped_rows", gpu="0", cause="uncorrectable") == "0"
    assert value(found, "vllm_omni_gpu_kernel_log_readable") == "1"
    assert "# TYPE vllm_omni_gpu_xid_errors_total counter" not in text  # no Xid logged: no series yet


def test_the_h100_capture_reads_here_as_the_exporter_read_it_on_that_host(tmp_path):
    """record/gpu-evidence.md 1p: nvidia-smi -q -x of an H100 (driver 580.159.04) and the exporter's answer on that
    host, root with its /dev/kmsg. Read here from the capture, the answer is the same line for line but the kernel
    log (none here)."""
    device = REPO / "tests" / "fixtures" / "gpu" / "h100-device"
    there = (device / "gpu-metrics.prom").read_text()
    here = exporter.Exporter(config(tmp_path, [0]), run=run_returning(Ran((device / "nvidia-smi-q.xml").read_text())))
    assert here.metrics().replace("kernel_log_readable 0", "kernel_log_readable 1") == there
    found = samples(there)
    assert value(found, "vllm_omni_gpu_present", gpu="0", name="NVIDIA H100 80GB HBM3") == "1"
    assert value(found, "vllm_omni_gpu_memory_total_bytes", gpu="0") == str(81559 * MIB)
    assert value(found, "vllm_omni_gpu_kernel_log_readable") == "1"
    assert "580.159.04" in (device / "nvidia-smi-version.txt").read_text()


def test_an_older_drivers_layout_and_its_ecc_errors_are_read(tmp_path):
    found = samples(exporter.Exporter(config(tmp_path, [0]), run=run_returning(Ran(OLD_DRIVER))).metrics())
    assert value(found, "vllm_omni_gpu_power_watts", gpu="0") == "250.12"
    assert value(found, "vllm_omni_gpu_power_limit_watts", gpu="0") == "300"
    assert value(found, "vllm_omni_gpu_utilization_ratio", gpu="0") == "0.87"
    assert value(found, "vllm_omni_gpu_ecc_errors", gpu="0", kind="corrected") == "5"
    assert value(found, "vllm_omni_gpu_ecc_errors", gpu="0", kind="uncorrected") == "1"
    assert value(found, "vllm_omni_gpu_memory_used_bytes", gpu="0") == str(31000 * MIB)
    assert not [k for k in found if k.startswith("vllm_omni_gpu_row_remap")]  # not reported: no sample, not 0
    assert value(found, "vllm_omni_gpu_kernel_log_readable") == "0"  # no such file: said, not a failure


def test_a_planned_gpu_that_nvidia_smi_no_longer_lists_is_reported_missing(tmp_path):
    found = samples(exporter.Exporter(config(tmp_path, [0, 1, 2, 3]), run=run_returning(Ran(H200X2))).metrics())
    assert value(found, "vllm_omni_gpu_present", gpu="1") == "1"
    assert found['vllm_omni_gpu_present{gpu="2"}'] == "0" and found['vllm_omni_gpu_present{gpu="3"}'] == "0"


@pytest.mark.parametrize("failure", [Ran("", returncode=15), subprocess.TimeoutExpired("nvidia-smi", 20),
                                     FileNotFoundError("nvidia-smi"), Ran("<nvidia_smi_log><gpu>")],
                         ids=["exit-15", "hangs", "absent", "truncated-xml"])
def test_nvidia_smi_failing_reports_it_and_every_planned_gpu_missing(tmp_path, failure):
    found = samples(exporter.Exporter(config(tmp_path, [0, 1]), run=run_returning(failure)).metrics())
    assert value(found, "vllm_omni_gpu_nvidia_smi_up") == "0"
    assert found == {"vllm_omni_gpu_nvidia_smi_up": "0", 'vllm_omni_gpu_present{gpu="0"}': "0",
                     'vllm_omni_gpu_present{gpu="1"}': "0", "vllm_omni_gpu_kernel_log_readable": "0"}


def test_xid_errors_are_counted_per_gpu_and_code_from_the_kernel_log_as_they_come(tmp_path):
    log = tmp_path / "kmsg"
    # /dev/kmsg records: "priority,sequence,microseconds,flags;message". The kernel names the GPU by domain, bus
    # and device (no function); one Xid is for a GPU nvidia-smi does not list (fallen off the bus).
    log.write_text("6,100,5000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159\n"
                   "3,101,9000,-;NVRM: Xid (PCI:0000:00:07): 48, pid=4242, name=python3, An uncorrectable double bit error\n")
    metrics = exporter.Exporter(config(tmp_path, [0, 1]), run=run_returning(Ran(H200X2)))
    found = samples(metrics.metrics())
    assert value(found, "vllm_omni_gpu_xid_errors_total", gpu="1", xid="48", bus_id="0000:00:07.0") == "1"
    with log.open("a") as handle:
        handle.write("3,102,9100,-;NVRM: Xid (PCI:0000:00:07): 48, pid=4242, name=python3, again\n"
                     "3,103,9200,-;NVRM: Xid (PCI:0000:00:06): 79, pid=0, GPU has fallen off the bus.\n"
                     "3,104,9300,-;NVRM: Xid (PCI:0000:9a:00): 79, pid=0, GPU has fallen off the bus.\n")
    found = samples(metrics.metrics())
    assert value(found, "vllm_omni_gpu_xid_errors_total", gpu="1", xid="48") == "2"  # counted once each
    assert value(found, "vllm_omni_gpu_xid_errors_total", gpu="0", xid="79") == "1"
    assert value(found, "vllm_omni_gpu_xid_errors_total", gpu="", bus_id="0000:9a:00", xid="79") == "1"
    assert "# TYPE vllm_omni_gpu_xid_errors_total counter" in metrics.metrics()


def test_nvidia_smi_is_found_in_the_search_path_and_run_for_real(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "q.xml").write_text(H200X2)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] || exit 2\ncat {tmp_path / "q.xml"}\n')
    tool.chmod(0o755)
    monkeypatch.setattr(exporter, "SEARCH_PATH", f"/nonexistent:{bin_dir}")
    found = samples(exporter.Exporter({**config(tmp_path, [0, 1]), "nvidia_smi": "nvidia-smi"}).metrics())
    assert value(found, "vllm_omni_gpu_nvidia_smi_up") == "1"
    assert value(found, "vllm_omni_gpu_present", gpu="1", uuid="GPU-af7d9b17-be6d-6450-ca7a-6b13f63de8b7") == "1"


def test_scrapes_within_the_cache_window_run_nvidia_smi_once(tmp_path):
    calls = []
    metrics = exporter.Exporter(config(tmp_path, [0], cache_s=5.0), run=run_returning(Ran(H200X2), calls=calls),
                                clock=iter([100.0, 103.0, 106.0]).__next__)
    first, second, third = metrics.metrics(), metrics.metrics(), metrics.metrics()
    assert first == second == third and len(calls) == 2
    assert calls[0] == ["nvidia-smi-not-on-this-machine", "-q", "-x"]  # not found in SEARCH_PATH: run as named


def test_it_answers_metrics_over_http_and_nothing_else(tmp_path):
    metrics = exporter.Exporter(config(tmp_path, [0]), run=run_returning(Ran(H200X2)))
    server = exporter.serve(metrics, "127.0.0.1", 0)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:  # noqa: S310 (a local http URL)
            assert answer.status == 200 and b"vllm_omni_gpu_present{" in answer.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/", timeout=5)  # noqa: S310 (a local http URL)
        assert refused.value.code == 404
    finally:
        server.shutdown()


# --- the plan ---------------------------------------------------------------------------------------


def hosts(*gpu_counts: int) -> dict:
    return {f"gpu-{chr(97 + i)}": {"ansible_host": f"10.0.0.{11 + i}", "vllm_omni_gpus": list(range(n))}
            for i, n in enumerate(gpu_counts)}


def test_each_engine_host_exports_the_gpus_its_stages_use_and_prometheus_scrapes_it():
    plan = build_plan(inventory(hosts(4, 3), TEXT))
    section = plan["gpu_metrics"]
    assert section["enabled"] is True and section["port"] == 9098
    assert {h: e["gpus"] for h, e in section["per_host"].items()} == {"gpu-a": [0, 1, 2, 3], "gpu-b": [0, 1]}
    rendered = render_tree(plan)
    assert json.loads(rendered["prometheus/targets/gpus.json"]) == [
        {"targets": ["10.0.0.11:9098"], "labels": {"host": "gpu-a"}},
        {"targets": ["10.0.0.12:9098"], "labels": {"host": "gpu-b"}}]
    assert json.loads(rendered["gpu-b/gpu-metrics/gpu-metrics.json"])["gpus"] == [0, 1]  # GPU 2 is left unused
    unit = rendered["gpu-a/systemd/vllm-omni-gpu-metrics.service"]
    assert "CapabilityBoundingSet=CAP_SYSLOG\n" in unit and "DeviceAllow=/dev/kmsg r\n" in unit
    assert "DeviceAllow=char-nvidia rw\n" in unit and "infiniband" not in unit and "\nUser=" not in unit
    (job,) = [j for j in _prometheus.scrape_configs(plan, "/t") if j["job_name"] == "vllm-omni-gpu"]
    assert job["file_sd_configs"] == [{"files": ["/t/gpus.json"]}]
    assert {r["service"] for r in plan["listen_ports"]["gpu-a"]} >= {"gpu-metrics", "self-heal"}
    assert "9098" in rendered["gpu-a/firewall.nft"]


def test_the_alerts_the_issue_asks_for_read_the_exporters_names_and_the_memory_setting():
    plan = build_plan(inventory(hosts(2), {**TEXT, "vllm_omni_alert_gpu_memory_ratio": 0.96}))
    rules = {r["alert"]: r for g in _prometheus.alert_rules(plan) for r in g["rules"]}
    assert {"VllmOmniGpuLost", "VllmOmniGpuXidErrors", "VllmOmniGpuUncorrectableErrors",
            "VllmOmniGpuMemoryNearlyFull"} <= set(rules)
    assert rules["VllmOmniGpuMemoryNearlyFull"]["expr"].endswith("> 0.96")
    assert "96%" in rules["VllmOmniGpuMemoryNearlyFull"]["annotations"]["summary"]
    assert "vllm_omni_gpu_present" in rules["VllmOmniGpuLost"]["expr"]
    assert rules["VllmOmniGpuXidErrors"]["labels"]["severity"] == "critical"


def test_the_simulator_runs_no_exporter_unless_asked_and_false_turns_it_off():
    simulator = {**TEXT, "vllm_omni_engine_backend": "simulator"}
    plan = build_plan(inventory(hosts(2), simulator))
    assert plan["gpu_metrics"]["per_host"] == {} and plan["gpu_metrics"]["enabled"] is False
    assert json.loads(render_tree(plan)["prometheus/targets/gpus.json"]) == []
    assert "VllmOmniGpuLost" not in {r["alert"] for g in _prometheus.alert_rules(plan) for r in g["rules"]}
    assert not any("gpu-metrics" in path for path in render_tree(plan))
    asked = build_plan(inventory(hosts(2), {**simulator, "vllm_omni_gpu_metrics": True}))
    assert list(asked["gpu_metrics"]["per_host"]) == ["gpu-a"]
    off = build_plan(inventory(hosts(2), {**TEXT, "vllm_omni_gpu_metrics": False}))
    assert off["gpu_metrics"]["per_host"] == {}
    assert not any(r["service"] == "gpu-metrics" for r in off["listen_ports"]["gpu-a"])


def test_an_exporter_port_on_another_port_is_refused_naming_both():
    problems = problems_of(inventory(hosts(2), {**TEXT, "vllm_omni_gpu_metrics_port": 9097}))
    assert len(problems) == 1 and "vllm_omni_gpu_metrics_port" in problems[0] and "9097" in problems[0], problems


@pytest.mark.parametrize("name, value", [("vllm_omni_gpu_metrics", "sometimes"), ("vllm_omni_gpu_metrics_port", 80),
                                         ("vllm_omni_alert_gpu_memory_ratio", 1.5),
                                         ("vllm_omni_alert_gpu_memory_ratio", "high")])
def test_bad_gpu_metrics_settings_are_refused(name, value):
    problems = problems_of(inventory(hosts(2), {**TEXT, name: value}))
    assert len(problems) == 1 and name in problems[0], problems
