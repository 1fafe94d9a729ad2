# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_cache
short_description: The controller's cache directory, or a path in it
version_added: 0.1.0
description:
  - The directory where the collection keeps what it makes on the controller between runs (wheel sets, fetched
    models and manifests, discovery, TLS material, reports, tools), which is C($VLLM_OMNI_CACHE), else
    C(~/.cache/vllm-omni-serve). An empty C(VLLM_OMNI_CACHE) counts as unset.
  - The same directory the planner, the discovery cache and the TLS material use; roles and playbooks read it here
    instead of spelling it, and join the plan's relative layout (C(vllm_omni_plan.artifacts.controller)) to it.
options:
  _terms:
    description: Relative parts joined to the cache directory in order (none, the directory itself).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Reports | this deployment's report directory on the controller
  ansible.builtin.set_fact:
    report_dir: >-
      {{ lookup('vllm_omni.serve.controller_cache', vllm_omni_plan.artifacts.controller.reports_dir,
                vllm_omni_plan.deployment_id) }}
"""

RETURN = r"""
_raw:
  description: One path, absolute.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._names import controller_cache_path


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [str(controller_cache_path(*[str(term) for term in terms]))]
        except ValueError as error:
            raise AnsibleLookupError(f"vllm_omni.serve.controller_cache: {error}") from None
