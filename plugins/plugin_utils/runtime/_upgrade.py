# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Small pure helpers of the rolling upgrade."""

from __future__ import annotations

import re

# Requests a pipeline still owes answers for: vLLM(-Omni) counts running and waiting requests;
# the simulator reports the requests it is serving.
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting", "xpyd_sim_active_requests")
# name, labels (a quoted value may hold "}" or an escaped quote), value, and Prometheus' optional timestamp.
SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?\s+'
                    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|NaN)(?:\s+-?\d+)?\s*$")
SECRETS_MARKER = "# --- secrets (written on the host only; not in the plan) ---"


def requests_in_flight(metrics: str) -> int:
    found = False
    total = 0.0
    for line in metrics.splitlines():
        match = SAMPLE.match(line.strip())
        if match and match.group(1) in IN_FLIGHT:
            found = True
            value = match.group(3)
            total += 0.0 if value == "NaN" else float(value)
    if not found:
        raise ValueError(f"/metrics shows none of {', '.join(IN_FLIGHT)}: cannot tell when the pipeline is drained")
    return int(total)


def strip_secrets(text: str) -> str:
    """An engine.env as rendered (the host-only secrets block removed)."""
    head, _sep, _rest = text.partition(SECRETS_MARKER + "\n")
    return head
