#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: report_files
short_description: Write JSON reports on the controller, one file per document
version_added: 0.1.0
description:
  - Writes each document as C(DEST/<name>.json) (sorted keys, indented) on the controller, in one step
    for all hosts. Reports are artifacts, so the task never reports a change.
  - Runs on the controller only (action plugin).
options:
  dest:
    description: Directory on the controller; created when missing.
    type: path
    required: true
  documents:
    description: File name (without C(.json); no slashes) to data.
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    description: Writes nothing in check mode (C(--check) changes nothing, the controller included); returns the paths
      it would write.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Preflight | one JSON report per host
  vllm_omni.serve.report_files:
    dest: /tmp/reports
    documents: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'preflight_report'))) }}"
  run_once: true
"""

RETURN = r"""
files:
  description: Paths written (in check mode, the paths that would be written).
  type: list
  elements: str
  returned: always
written:
  description: Whether the files were written (false in check mode).
  type: bool
  returned: always
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import REPORT_FILES, controller_only


def main():
    controller_only("report_files", REPORT_FILES, supports_check_mode=True)


if __name__ == "__main__":
    main()
