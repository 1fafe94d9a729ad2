# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Prometheus' texts from the plan: the file_sd target files, the scrape configuration and the alert rules,
and the front door's certificate metric.

The alert rules query only the metric names of data/metrics.yml (tests/unit/policy/test_metrics.py holds them to it).
Serialisation only.
"""

from __future__ import annotations

import datetime
import json

from ..plan._observability import JOBS, targets
from . import _yaml

CERTIFICATE_EXPIRY = "vllm_omni_frontdoor_certificate_expiry_timestamp_seconds"


def scrape_configs(plan: dict, targets_dir: str) -> list[dict]:
    jobs = []
    for stem in targets(plan):
        job = {"job_name": JOBS[stem], "metrics_path": "/metrics", "scrape_interval": "15s",
               "file_sd_configs": [{"files": [f"{targets_dir}/{stem}.json"]}]}
        if stem == "frontdoor":
            # Not verified on purpose: the scrape must go on reading an expired certificate's date (a verified
            # one would fail exactly then and the expiry alert would resolve), whichever CA signed it. It sends
            # nothing and reads one public date.
            job.update({"scheme": "https", "scrape_interval": "60s", "tls_config": {"insecure_skip_verify": True}})
        jobs.append(job)
    return jobs


def certificate_metrics(pem: str) -> str:
    """The front door's /metrics text: the first certificate of ``pem``'s notAfter as Unix time. ValueError when
    ``pem`` holds no readable certificate."""
    from cryptography import x509  # ansible-core's own dependency, on the controller

    if "-----BEGIN CERTIFICATE-----" not in (pem or ""):
        raise ValueError("no PEM certificate")
    certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
    expires = getattr(certificate, "not_valid_after_utc", None) or \
        certificate.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    return (f"# HELP {CERTIFICATE_EXPIRY} When the front door's TLS certificate expires (notAfter, Unix time), "
            "as the last deploy installed it.\n"
            f"# TYPE {CERTIFICATE_EXPIRY} gauge\n"
            f"{CERTIFICATE_EXPIRY} {int(expires.timestamp())}\n")


def text_stage(layout: str) -> int:
    """The stage that writes a client's text: decode (1) in pd, the thinker (0) aggregated."""
    return 1 if layout == "pd" else 0


def client_ttft(layout: str, quantile: float, window: str) -> str:
    """PromQL: a pipeline's time to first token as its clients see it, per (host, pipeline).

    vLLM-Omni exports each stage's TTFT from that stage's own arrival. In pd a client's first token comes out of
    decode after the whole prefill (one token, so its TTFT is its duration): the client's TTFT is prefill's plus
    decode's, summed per quantile (an upper bound for the sum's quantile; for the median, close). Aggregated: the
    thinker's. The talker and code2wav stages (audio) are not on the text path and are left out.
    """
    stages = 'stage=~"0|1"' if layout == "pd" else 'stage="0"'
    return (f"sum by (host, pipeline) (histogram_quantile({quantile:g}, sum by (host, pipeline, stage, le) "
            f'(rate(vllm:time_to_first_token_seconds_bucket{{job="vllm-omni-engine", {stages}}}[{window}]))))')


def alert_rules(plan: dict) -> list[dict]:
    """The deployment's alert rules (one Prometheus rule group). The PD ones only where the layout is pd;
    the engine-metric ones never fire on the simulator, whose /metrics has none of the engine's names."""
    pd_sum = ", prefill's plus decode's" if plan["layout"] == "pd" else ""
    engine = 'job="vllm-omni-engine"'
    objective = plan["monitoring"]["alerts"]["ttft_seconds"]
    rules = [
        {"alert": "VllmOmniEngineDown", "expr": f"up{{{engine}}} == 0", "for": "1m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "Pipeline {{ $labels.pipeline }} on {{ $labels.host }} does not answer /metrics",
                         "description": "Its unit: journalctl -a -u vllm-omni@{{ $labels.pipeline }} on {{ $labels.host }}."}},
        {"alert": "VllmOmniRouterDown", "expr": 'up{job="vllm-omni-router"} == 0', "for": "1m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "The router on {{ $labels.host }} does not answer /metrics",
                         "description": "journalctl -a -u vllm-omni-router on {{ $labels.host }}."}},
        # Up but out of service: the router's health checks find the pipeline failing /health. On a GPU, a
        # distributed pipeline whose headless stage died stays so (its head lives on with EngineDeadError, every
        # request HTTP 500) until the pipeline restarts; up == 1 all along, so EngineDown never fires there.
        {"alert": "VllmOmniPipelineUnhealthy",
         "expr": 'min by (host, worker) (vllm_router_worker_health{job="vllm-omni-router"}) == 0', "for": "5m",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "The router on {{ $labels.host }} has found {{ $labels.worker }} unhealthy "
                                    "for 5 minutes (no traffic goes there)",
                         "description": "A cold start takes minutes; longer, read the pipeline's journal. A "
                                        "distributed pipeline whose headless stage died does not recover alone: "
                                        "restart it in stage order (docs/operations.md)."}},
        {"alert": "VllmOmniTTFTOverObjective",
         "expr": f"{client_ttft(plan['layout'], 0.99, '10m')} > {objective:g}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"TTFT p99 of {{{{ $labels.pipeline }}}} on {{{{ $labels.host }}}} is over "
                                    f"the objective ({objective:g} s, vllm_omni_alert_ttft_seconds)",
                         "description": f"p99 over 10 minutes{pd_sum}: {{{{ $value | humanizeDuration }}}}."}},
    ]
    if plan["router"]["frontdoor"]["enabled"]:
        rules += _certificate_rules(plan)
    if plan.get("self_heal", {}).get("per_host"):
        rules += _self_heal_rules()
    if plan.get("gpu_metrics", {}).get("per_host"):
        rules += _gpu_rules(plan["gpu_metrics"]["memory_alert_ratio"])
    if plan["layout"] == "pd":
        rules += _pd_rules(engine)
    return [{"name": "vllm-omni", "rules": rules}]


def _certificate_rules(plan: dict) -> list[dict]:
    """The front door's certificate expiring soon."""
    days = plan["monitoring"]["alerts"]["certificate_days"]
    return [
        {"alert": "VllmOmniCertificateExpiresSoon",
         "expr": f'({CERTIFICATE_EXPIRY}{{job="vllm-omni-frontdoor"}} - time()) / 86400 < {days}',
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"The front door certificate on {{{{ $labels.host }}}} expires in less than "
                                    f"{days} days (vllm_omni_alert_certificate_days)",
                         "description": "{{ $value | printf \"%.1f\" }} days left (negative: expired). Renew: "
                                        "deploy -e frontdoor_certificate_renew=true (the collection's CA), or "
                                        "replace vllm_omni_tls_cert_file and deploy."}}]


def _self_heal_rules() -> list[dict]:
    """What the self-heal agents did: a restart is worth a look (it healed, but why did it fail?); giving up needs
    a person now."""
    job = 'job="vllm-omni-self-heal"'
    return [
        {"alert": "VllmOmniSelfHealed",
         "expr": f"increase(vllm_omni_self_heal_restarts_total{{{job}}}[15m]) > 0",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "The self-heal agent on {{ $labels.host }} restarted {{ $labels.unit }} "
                                    "(pipeline {{ $labels.pipeline }}) in the last 15 minutes",
                         "description": "Why it failed: journalctl -u vllm-omni-heal -u {{ $labels.unit }} on "
                                        "{{ $labels.host }}; the status playbook shows every self-heal."}},
        {"alert": "VllmOmniSelfHealGaveUp",
         "expr": f"max by (host, pipeline, unit) (vllm_omni_self_heal_gave_up{{{job}}}) == 1",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "The self-heal agent on {{ $labels.host }} gave up restarting {{ $labels.unit }}"
                                    " (pipeline {{ $labels.pipeline }}): it keeps failing",
                         "description": "vllm_omni_self_heal_max_restarts restarts within an hour did not bring it "
                                        "back. Read its journal; a deploy or a restart in stage order "
                                        "(docs/operations.md) once the cause is fixed."}},
    ]


def _gpu_rules(memory_ratio: float) -> list[dict]:
    """What the GPU health exporters report: a GPU gone or failing needs a person (and usually a drain and a node
    reboot or RMA); memory nearly full is a process beside vLLM's on the GPU, or a leak."""
    job = 'job="vllm-omni-gpu"'
    where = "GPU {{ $labels.gpu }} of {{ $labels.host }}"
    return [
        {"alert": "VllmOmniGpuLost",
         "expr": f"vllm_omni_gpu_present{{{job}}} == 0 or vllm_omni_gpu_nvidia_smi_up{{{job}}} == 0", "for": "1m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"{where} is not listed by nvidia-smi (or nvidia-smi fails on the host)",
                         "description": "A GPU that fell off the bus (Xid 79) or that the driver lost: its stages "
                                        "fail. Read `nvidia-smi` and `journalctl -k | grep NVRM` on the host; "
                                        "drain it (stop.yml --limit) and reset or reboot; docs/operations.md."}},
        # A GPU's first Xid of a code starts its series at 1, where increase() sees no rise: new series count too.
        {"alert": "VllmOmniGpuXidErrors",
         "expr": f"increase(vllm_omni_gpu_xid_errors_total{{{job}}}[10m]) > 0 or "
                 f"(vllm_omni_gpu_xid_errors_total{{{job}}} unless vllm_omni_gpu_xid_errors_total{{{job}}} offset 10m)",
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"{where} logged Xid {{{{ $labels.xid }}}} in the last 10 minutes",
                         "description": "The NVIDIA driver reported an error (journalctl -k | grep Xid on the host; "
                                        "NVIDIA's Xid catalogue says what the code means and whether a reset "
                                        "or service is needed)."}},
        {"alert": "VllmOmniGpuUncorrectableErrors",
         "expr": f'increase(vllm_omni_gpu_ecc_errors{{{job}, kind="uncorrected"}}[10m]) > 0 '
                 f"or vllm_omni_gpu_row_remap_failed{{{job}}} == 1",
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"{where} has uncorrectable memory errors or a failed row remap",
                         "description": "Its results can no longer be trusted: drain the host and reset the GPU; "
                                        "a failed row remap needs NVIDIA service."}},
        {"alert": "VllmOmniGpuMemoryNearlyFull",
         "expr": f"vllm_omni_gpu_memory_used_bytes{{{job}}} / vllm_omni_gpu_memory_total_bytes{{{job}}} "
                 f"> {memory_ratio:g}", "for": "10m",
         "labels": {"severity": "warning"},
         "annotations": {"summary": f"{where} has more than {memory_ratio:.0%} of its memory in use for 10 minutes "
                                    "(vllm_omni_alert_gpu_memory_ratio)",
                         "description": "More than vLLM's own share: another process on the GPU (nvidia-smi lists "
                                        "them) or a leak; the next allocation fails with out-of-memory."}},
    ]


def _pd_rules(engine: str) -> list[dict]:
    """The PD handoff: requests that ended in an engine error, decode waiting on KV."""
    return [
        # FinishReason.ERROR: "a retryable request-level internal error (e.g., KV load failure)".
        {"alert": "VllmOmniPDHandoffFailures",
         "expr": (f'sum by (host, pipeline) (increase(vllm:request_success_total{{{engine}, finished_reason="error"}}'
                  "[5m])) > 0"),
         "labels": {"severity": "critical"},
         "annotations": {"summary": "Requests of {{ $labels.pipeline }} on {{ $labels.host }} ended in an engine "
                                    "error (a failed KV load among them) in the last 5 minutes",
                         "description": "{{ $value }} request(s); the pipeline's journal shows the connector's lines."}},
        # reason="deferred": waiting on something other than batch room; on a PD decode stage, remote KV.
        {"alert": "VllmOmniDecodeWaitingForKV",
         "expr": f'max by (host, pipeline) (vllm:num_requests_waiting_by_reason{{{engine}, reason="deferred"}}) > 0',
         "for": "5m", "labels": {"severity": "warning"},
         "annotations": {"summary": "Requests of {{ $labels.pipeline }} on {{ $labels.host }} have waited 5 minutes "
                                    "on something other than capacity (decode: the prefill's KV)",
                         "description": "{{ $value }} request(s) deferred; a decode holding them keeps their KV "
                                        "blocks until the transfer times out."}},
    ]


def rules_text(plan: dict) -> str:
    return ("# Rendered by vllm_omni.serve from the plan: the deployment's alert rules (promtool check rules).\n"
            + _yaml.dump({"groups": alert_rules(plan)}))


def prometheus_files(plan: dict, targets_dir: str) -> dict[str, str]:
    """{relative path: text}: targets/<stem>.json for file_sd, scrape-configs.yml to include, rules.yml."""
    # One target group per line: readable diffs, and the C encoder (indent= would fall back to Python).
    files = {f"targets/{stem}.json": "[\n" + ",\n".join(json.dumps(g, sort_keys=True) for g in groups) + "\n]\n"
             for stem, groups in targets(plan).items()}
    files["scrape-configs.yml"] = ("# Rendered by vllm_omni.serve from the plan: the deployment's scrape jobs.\n"
                                   + _yaml.dump({"scrape_configs": scrape_configs(plan, targets_dir)}))
    files["rules.yml"] = rules_text(plan)
    return files
