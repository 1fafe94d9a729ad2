# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _prometheus

DOCUMENTATION = r"""
name: frontdoor_certificate_metrics
short_description: The front door's /metrics text from its certificate
version_added: 0.1.0
description:
- The Prometheus exposition text the front door serves at C(/metrics), one gauge,
  C(vllm_omni_frontdoor_certificate_expiry_timestamp_seconds), the certificate's notAfter as Unix time; the alert
  rule C(VllmOmniCertificateExpiresSoon) reads it.
options:
  _input:
    description: The certificate as installed (PEM; the first certificate counts).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Front door | its certificate's expiry for Prometheus
  ansible.builtin.copy:
    content: "{{ certificate_pem | vllm_omni.serve.frontdoor_certificate_metrics }}"
    dest: /etc/nginx/vllm-omni/metrics.prom
    mode: "0644"
"""

RETURN = r"""
_value:
  description: Exposition text (HELP, TYPE and the sample).
  type: str
"""

from ansible.errors import AnsibleFilterError


def frontdoor_certificate_metrics(pem):
    try:
        return _prometheus.certificate_metrics(str(pem))
    except (ImportError, ValueError, UnicodeEncodeError) as error:
        raise AnsibleFilterError(f"frontdoor_certificate_metrics: not a readable PEM certificate ({error})") from None


class FilterModule:
    def filters(self):
        return {"frontdoor_certificate_metrics": frontdoor_certificate_metrics}
