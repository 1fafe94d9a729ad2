#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: artifact_pull
short_description: Pull one artifact onto the host from the first source that serves it whole, showing progress
version_added: 0.1.0
description:
  - Runs the artifacts role's C(artifact.py pull) on the host in the background and prints its progress every
    I(progress_interval) seconds (bytes so far, rate, time left; or which files it is checking), so a 70 GB model
    is not a silent wait.
  - The host's copy ends up exactly the manifest's files, every sha256 checked; files that fail are deleted and
    pulled again, and a source that fails (or serves other bytes) is followed by the next one.
  - Nothing is transferred when every file already matches.
  - Runs as an action on the controller (it copies the script to the host, starts it, polls it).
options:
  dest:
    description: The artifact's directory on the host (taken as given, nothing is expanded on the controller).
    type: str
    required: true
  manifest:
    description: The controller's manifest of the artifact, on the host (taken as given).
    type: str
    required: true
  sources:
    description: rsync URLs to pull from, in order (the parent host, then the controller).
    type: list
    elements: str
    required: true
  full:
    description: Hash every file, not only those whose size or mtime changed since their last check.
    type: bool
    default: false
  size:
    description: The artifact's bytes, for the progress line's total.
    type: int
  timeout:
    description: Seconds the pull may take before it is stopped and the task fails.
    type: int
    default: 7200
  progress_interval:
    type: int
    default: 10
attributes:
  check_mode:
    support: none
    description: Pulls; the artifacts role skips it in check mode.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
  - vllm_omni.serve.progress
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Artifacts | pull the model from the parent, else the controller
  vllm_omni.serve.artifact_pull:
    dest: /var/lib/vllm-omni/hf/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct/snapshots/0123456789abcdef0123456789abcdef01234567
    manifest: /var/lib/vllm-omni-serve/artifacts/model.json
    sources: [rsync://10.0.0.11:8873/model, rsync://10.0.0.1:8873/model]
    size: 70000000000
"""

RETURN = r"""
id:
  description: The artifact.
  returned: success
  type: str
bytes_received:
  description: Bytes received (0 when the host already held every file).
  returned: success
  type: int
source:
  description: The URL the artifact came from; null when nothing was needed.
  returned: success
  type: str
repaired:
  description: Files that were damaged or not in the manifest, deleted (and pulled again).
  returned: success
  type: list
  elements: str
fallbacks:
  description: Sources that failed before the one that worked, each with why.
  returned: success
  type: list
  elements: str
seconds:
  description: How long the pull took.
  returned: success
  type: float
line:
  description: One line saying what happened.
  returned: success
  type: str
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import ARTIFACT_PULL, controller_only


def main():
    controller_only("artifact_pull", ARTIFACT_PULL, supports_check_mode=False)


if __name__ == "__main__":
    main()
