#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: render_plan
short_description: Write a vLLM-Omni deployment plan and every pipeline's files to a directory on the controller
version_added: 0.1.0
description:
  - Writes C(DEST/plan.json) and, per host and pipeline, C(DEST/<host>/<pipeline>/stage_config.yaml),
    C(engine.env) and C(argv) (one argument per line), exactly the files the engine role installs.
  - Runs on the controller only (action plugin); touches no managed host.
  - The directory is replaced as a whole, atomically; files of pipelines no longer in the plan disappear.
    It refuses to replace a non-empty directory it did not create (it marks its own with C(.vllm-omni-render)).
  - Output is deterministic; rendering the same plan twice changes nothing.
options:
  plan:
    description: The plan from the P(vllm_omni.serve.plan#filter) filter.
    type: dict
    required: true
  dest:
    description: Directory to write. Created when missing.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    description: Reports which files would change; writes nothing.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Render the plan
  vllm_omni.serve.render_plan:
    plan: "{{ vllm_omni_plan }}"
    dest: /tmp/vllm-omni-render
"""

RETURN = r"""
dest:
  description: The directory written.
  type: str
  returned: always
files:
  description: Number of files in the render.
  type: int
  returned: always
added:
  description: Files that did not exist before.
  type: list
  elements: str
  returned: always
modified:
  description: Files whose content changed.
  type: list
  elements: str
  returned: always
removed:
  description: Files no longer part of the render.
  type: list
  elements: str
  returned: always
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import RENDER_PLAN, controller_only


def main():
    controller_only("render_plan", RENDER_PLAN, supports_check_mode=True)


if __name__ == "__main__":
    main()
