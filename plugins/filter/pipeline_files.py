# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pipeline_files
short_description: The files of one vLLM-Omni pipeline, rendered from the plan
version_added: 0.1.0
description:
  - Returns the exact texts the engine role installs for a pipeline and C(render.yml) writes,
    so a host's files equal the render by construction. Serialisation only; every value comes from the plan.
  - Keys are C(stage_config.yaml), C(engine.env), C(argv) and C(10-pipeline.conf) (the systemd drop-in
    holding C(EnvironmentFile=) and the exact C(ExecStart=)).
options:
  plan:
    description: The whole plan (for the engine version and layout in the file headers).
    type: dict
    required: true
  file:
    description: Return only this file's text (one of the keys above) instead of the whole dict.
    type: str
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.pipeline
seealso:
  - plugin: vllm_omni.serve.plan
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Engine | stage config of each pipeline
  ansible.builtin.copy:
    content: "{{ (item | vllm_omni.serve.pipeline_files(vllm_omni_plan))['stage_config.yaml'] }}"
    dest: "{{ item.paths.stage_config }}"
    mode: "0640"
  loop: "{{ vllm_omni_plan.hosts[inventory_hostname].pipelines }}"
"""

RETURN = r"""
_value:
  description: File name to file text.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import pipeline_files as _pipeline_files


def pipeline_files(pipeline, plan, file=None):
    if not isinstance(pipeline, dict) or "argv" not in pipeline or not isinstance(plan, dict) or "engine" not in plan:
        raise AnsibleFilterError("pipeline_files expects a pipeline of the plan and the plan itself: "
                                 "pipeline | vllm_omni.serve.pipeline_files(vllm_omni_plan)")
    files = _pipeline_files(plain(plan), plain(pipeline))
    if file is None:
        return files
    if file not in files:
        raise AnsibleFilterError(f"pipeline_files: no file {file!r}; files are {', '.join(files)}")
    return files[file]


class FilterModule:
    def filters(self):
        return {"pipeline_files": pipeline_files}
