# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: status_document
short_description: The deployment's status as one document, from what status.yml observed
version_added: 0.1.0
description:
  - Per pipeline its unit state, health, GPUs, ports and router membership, compared with the plan;
    C(ok) is true only when every pipeline is active, healthy and a healthy router member, and the
    router lists no worker the plan does not have.
options:
  units:
    description: host -> unit -> systemd properties (C(ActiveState), C(SubState), C(MainPID), C(ActiveEnterTimestamp)).
    type: dict
    required: true
  health:
    description: pipeline URL -> HTTP status of C(/health), or null.
    type: dict
    required: true
  router:
    description: router host -> C(health), C(workers) (the router's C(/workers) list) and C(certificate) (the front
      door's certificate, PEM; empty without one). Each router in the document shows C(certificate_expires) (UTC) and
      C(certificate_days_left).
    type: dict
    required: true
  metrics:
    description: The deployment's Prometheus' answers to P(vllm_omni.serve.status_queries#filter) (key -> the
      C(/api/v1/query) JSON, null for a query that failed), or null where the plan runs no Prometheus. Each pipeline
      then shows C(metrics) (TTFT p50/p99, ITL p50, tokens per second over C(metrics_window)) or C(metrics_note)
      (C(no prometheus), C(prometheus did not answer), C(no data)), beside C(uptime_s), C(restarts) and C(version).
    type: dict
    required: false
extends_documentation_fragment:
  - vllm_omni.serve.plan_input
seealso:
  - plugin: vllm_omni.serve.status_table
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Status | document
  ansible.builtin.set_fact:
    status: "{{ vllm_omni_plan | vllm_omni.serve.status_document(units, health, router) }}"
"""

RETURN = r"""
_value:
  description: C(ok), C(backend), C(stand_in), C(version), C(metrics_window), C(metrics_source), C(pipelines),
    C(routers), C(router_members_not_in_plan).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _status


def status_document(plan, units, health, router, metrics=None, self_heal=None):
    if not isinstance(plan, dict) or "hosts" not in plan:
        raise AnsibleFilterError("status_document expects the plan as input")
    return _status.status_document(plain(plan), plain(units), plain(health), plain(router),
                                   metrics=None if metrics is None else plain(metrics),
                                   self_heal=None if self_heal is None else plain(self_heal))


class FilterModule:
    def filters(self):
        return {"status_document": status_document}
