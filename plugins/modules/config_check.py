#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: config_check
short_description: Check a vLLM-Omni stage config with the engine installed on the host
version_added: 0.1.0
description:
  - Runs the engine venv's own Python over a candidate stage config. It loads the file the way
    C(vllm serve --omni) does for the given flag, compares the resolved stages (ids, model stages,
    devices, tensor-parallel sizes, inputs) with what the plan expects, runs the engine's prefill/decode
    detection and validation, and imports every dotted path the file names.
  - Fails with every problem found. The engine role writes new configs to a candidate path, runs this
    check, and only then moves the file into place, so a config the engine would reject never replaces
    a working one.
  - Read-only; reports the same in check mode. Needs no GPU and no model weights (a generated model
    C(config.json) is used unless I(model_dir) is given).
options:
  venv:
    description: The engine venv (holding C(bin/python) with vllm and vllm-omni).
    type: path
    required: true
  config:
    description: The stage-config file to check.
    type: path
    required: true
  config_flag:
    description: The flag the engine will load it with.
    type: str
    required: true
    choices: [--stage-configs-path, --deploy-config]
  model_dir:
    description: A model directory with a C(config.json); a generated Qwen3-Omni one when omitted.
    type: path
  environment:
    description: The pipeline's environment (C(VLLM_MOONCAKE_BOOTSTRAP_PORT) decides the bootstrap address).
    type: dict
    default: {}
  expected_stages:
    description: Stages the engine must resolve, in order; each a dict of any of C(id), C(model_stage),
      C(devices), C(tensor_parallel_size), C(inputs).
    type: list
    elements: dict
  expected_pd:
    description: C(pair) (prefill and decode stage ids) and C(bootstrap) (C(kv_ip:port)) the engine must
      detect; C(pair) null when the file must not be a prefill/decode pipeline. Omit to skip the comparison.
      C(orchestrator) false (a headless stage of a distributed pipeline) skips the check of the address the
      orchestrator would hand decode from the environment; C(kv_connector) names the class both stages must load.
    type: dict
  expected_fixes:
    description: The collection's engine-plugin fixes that must be in force in this venv (the plan's
      C(backend.engine_plugin.fixes)); each one that is not, or a plugin whose files differ from its RECORD or
      that vLLM would not load under I(environment), is a problem.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds the engine may take to import and resolve.
    type: int
    default: 300
attributes:
  check_mode:
    support: full
    description: Runs the same read-only check.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Engine | check the candidate stage config with the installed engine
  vllm_omni.serve.config_check:
    venv: /opt/vllm-omni/venvs/vllm-omni-0.26.0
    config: /etc/vllm-omni/omni0/stage_config.yaml.candidate
    config_flag: --stage-configs-path
    environment: {VLLM_MOONCAKE_BOOTSTRAP_PORT: "8998"}
    expected_pd: {pair: [0, 1], bootstrap: "10.0.0.11:8998"}
"""

RETURN = r"""
versions:
  description: The vllm and vllm_omni versions of the venv.
  type: dict
  returned: when the engine ran
stages:
  description: What the engine resolved, one dict per stage (id, model_stage, devices, tensor_parallel_size, inputs).
  type: list
  elements: dict
  returned: when the engine ran
pd_pair:
  description: Prefill and decode stage ids the engine detected, or null.
  type: list
  elements: int
  returned: when the engine ran
pd_bootstrap_addr:
  description: The bootstrap address the engine's PD validation derives (kv_ip:port).
  type: str
  returned: for prefill/decode files
runtime_bootstrap_addr:
  description: The bootstrap address the orchestrator hands the decode stage.
  type: str
  returned: for prefill/decode files
engine_plugin:
  description: The collection's engine plugin in the venv (revision, fixes_in_force, loaded_by_vllm, problems), or
    null where it is not installed.
  type: dict
  returned: when the engine ran
imported:
  description: Dotted paths imported successfully.
  type: list
  elements: str
  returned: when the engine ran
problems:
  description: Everything wrong, one sentence each.
  type: list
  elements: str
  returned: always
"""

import inspect
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vllm_omni.serve.plugins.module_utils import _engine_check


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "config": {"type": "path", "required": True},
            "config_flag": {"type": "str", "required": True, "choices": ["--stage-configs-path", "--deploy-config"]},
            "model_dir": {"type": "path"},
            "environment": {"type": "dict", "default": {}},
            "expected_stages": {"type": "list", "elements": "dict"},
            "expected_pd": {"type": "dict"},
            "expected_fixes": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    params = module.params
    python = os.path.join(params["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        module.fail_json(msg=f"{python} does not exist: install the engine venv first (engine role)", problems=[])
    if not os.path.isfile(params["config"]):
        module.fail_json(msg=f"{params['config']} does not exist", problems=[])
    request = {"config": params["config"], "config_flag": params["config_flag"], "model_dir": params["model_dir"],
               "environment": params["environment"], "expected_stages": params["expected_stages"],
               "expected_fixes": params["expected_fixes"]}
    if params["expected_pd"] is not None:
        request["expected_pd"] = params["expected_pd"]
    source = inspect.getsource(_engine_check)
    rc, stdout, stderr = module.run_command(
        ["timeout", str(params["timeout"]), python, "-c", source], data=json.dumps(request), binary_data=True,
        environ_update={"LANGUAGE": "C", "LC_ALL": "C", "HF_HUB_OFFLINE": "1"})
    answer = _engine_check.parse_answer(stdout)
    if answer is None:
        tail = "\n".join((stderr or stdout).splitlines()[-15:])
        module.fail_json(msg=f"the engine venv could not run the config check (rc={rc}); last output:\n{tail}",
                         rc=rc, problems=[])
    result = dict(answer["answers"][0], versions=answer["versions"], changed=False)
    if result["problems"]:
        module.fail_json(msg=f"{params['config']} would not run: " + "; ".join(result["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
