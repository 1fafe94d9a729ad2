#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_build
short_description: Build a pinned venv beside the running one and swap it in, showing progress
version_added: 0.1.0
description:
  - Runs the python_venv role's C(build-venv.sh) on the host in the background. The script creates the venv beside
    the old one (C(PATH.new); pip builds in place), installs exactly the lock (every hash checked, nothing
    resolved beyond it), checks every pin, and renames it into place.
  - Every I(progress_interval) seconds it prints the step, and while packages install the bytes written of the
    wheels' unpacked size, the rate and the time left, so an engine venv of several GB is not a silent wait.
  - Runs as an action on the controller (it copies the script to the host, starts it, polls it).
  - With I(wait=false) it only starts the build and returns I(job); a later task given that I(job) waits for it.
    On more hosts than C(forks), one task that builds and waits holds a fork for each host's whole build, so the
    builds run one batch of forks after another; started in one task and waited for in the next, they run side
    by side.
  - One build at a time in the venvs' directory on a host, which the script locks. A build an interrupted run left
    going ends before the next one starts.
options:
  path:
    description: The venv's path on the host (taken as given, nothing is expanded on the controller).
    type: str
    required: true
  settings:
    description: The script's C(PYTHON_VENV_*) environment (installer, interpreter, lock, wheel directory, packages,
      marker); see the python_venv role's C(tasks/install.yml). Required to start a build (no I(job)).
    type: dict
  wait:
    description: Wait for the build to end. C(false) returns I(job) as soon as the build has started.
    type: bool
    default: true
  job:
    description: What a task with I(wait=false) returned as I(job), for this host. Waits for that build instead of
      starting one; I(timeout) counts from its start.
    type: dict
  timeout:
    description: Seconds the build may take before it is stopped and the task fails.
    type: int
    default: 3600
attributes:
  check_mode:
    support: none
    description: Builds; the python_venv role reports what check mode would install instead.
  action:
    support: full
    description: The work is the action's; this file documents it.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
  - vllm_omni.serve.progress
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Python venv | build the venv next to the old one, install, verify the pins, swap in
  vllm_omni.serve.venv_build:
    path: /opt/vllm-omni/venvs/vllm-omni-0.26.0
    settings:
      PYTHON_VENV_PYTHON: /usr/bin/python3
      PYTHON_VENV_INSTALLER: uv
      PYTHON_VENV_UV: /opt/vllm-omni/tools/bin/uv
      PYTHON_VENV_FIND_LINKS: /var/lib/vllm-omni-serve/wheelhouse/engine-0.26.0
      PYTHON_VENV_LOCK: /var/lib/vllm-omni-serve/wheelhouse/engine-0.26.0/engine-0.26.0.host.txt
      PYTHON_VENV_PACKAGES: vllm-omni==0.26.0
      PYTHON_VENV_MARKER: '{"packages": ["vllm-omni==0.26.0"]}'

# On a fleet: start every host's build, then wait (the builds run side by side, not one batch of forks at a time)
- name: Start the build
  vllm_omni.serve.venv_build:
    path: /opt/vllm-omni/venvs/vllm-omni-0.26.0
    wait: false
    settings:
      PYTHON_VENV_PYTHON: /usr/bin/python3
      PYTHON_VENV_INSTALLER: uv
      PYTHON_VENV_UV: /opt/vllm-omni/tools/bin/uv
      PYTHON_VENV_LOCK: /var/lib/vllm-omni-serve/wheelhouse/engine-0.26.0/engine-0.26.0.host.txt
      PYTHON_VENV_PACKAGES: vllm-omni==0.26.0
  register: venv_started

- name: Wait for it
  vllm_omni.serve.venv_build:
    path: /opt/vllm-omni/venvs/vllm-omni-0.26.0
    job: "{{ venv_started.job }}"
"""

RETURN = r"""
path:
  description: The venv's path.
  type: str
  returned: success
job:
  description: The started build (its directory on the host, process group and start time), for a later task's
    I(job).
  type: dict
  returned: when I(wait=false)
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import VENV_BUILD, controller_only


def main():
    controller_only("venv_build", VENV_BUILD, supports_check_mode=False)


if __name__ == "__main__":
    main()
