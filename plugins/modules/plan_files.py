#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: plan_files
short_description: Put the plan's directories and files for one host in place in one call
version_added: 0.1.0
description:
  - Creates each directory and writes each file it is given, with the owner, group and mode given, and only
    where the host differs (text compared byte for byte). One call replaces a loop of C(copy) and C(file) tasks,
    each of which costs a round trip to the host.
  - A changed file is written to a temporary file beside it, checked with I(files[].validate) when one is given,
    and renamed into place, so readers never see half a file and a refused text never replaces a working one.
  - The roles pass the plan's footprint entries with the texts the P(vllm_omni.serve.install_set#filter) filter
    renders, so what lands is what C(render.yml) writes.
options:
  directories:
    description: Directories, parents before children.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      owner:
        description: Owning user.
        type: str
        required: true
      group:
        description: Owning group.
        type: str
        required: true
      mode:
        description: Octal mode, such as C(0755).
        type: str
        required: true
  files:
    description: Files, in the order they are written (one another's check includes comes first).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path; its directory must exist or be listed in I(directories).
        type: path
        required: true
      content:
        description: The whole text.
        type: str
        required: true
      owner:
        description: Owning user.
        type: str
        required: true
      group:
        description: Owning group.
        type: str
        required: true
      mode:
        description: Octal mode, such as C(0644).
        type: str
        required: true
      validate:
        description: A command run on the candidate before it replaces the file; C(%s) stands for the candidate.
        type: str
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing (validation does not run).
  diff_mode:
    support: full
    description: Each changed file's old and new text, or its old and new owner, group and mode.
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Firewall | ruleset directory, peer set, unit and ruleset
  vllm_omni.serve.plan_files:
    directories: "{{ firewall_install.directories }}"
    files: "{{ firewall_install.files }}"
  vars:
    firewall_install: >-
      {{ vllm_omni_plan | vllm_omni.serve.install_set(inventory_hostname, ['firewall'], {'.nft': 'nft -c -f %s'}) }}
  register: firewall_files_result
"""

RETURN = r"""
changed_paths:
  description: The directories and files that were (in check mode, would be) created or changed.
  type: list
  elements: str
  returned: always
directories:
  description: Each directory's C(path) and C(changed).
  type: list
  elements: dict
  returned: always
files:
  description: Each file's C(path) and C(changed).
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vllm_omni.serve.plugins.module_utils._files import FilesError, apply

_OWNED = {"owner": {"type": "str", "required": True}, "group": {"type": "str", "required": True},
          "mode": {"type": "str", "required": True}}


def main():
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [],
                            "options": {"path": {"type": "path", "required": True}, **_OWNED}},
            "files": {"type": "list", "elements": "dict", "default": [],
                      "options": {"path": {"type": "path", "required": True},
                                  "content": {"type": "str", "required": True},
                                  "validate": {"type": "str"}, **_OWNED}},
        },
        supports_check_mode=True)
    try:
        result = apply(module.params["directories"], module.params["files"], module.check_mode)
    except (FilesError, OSError) as error:
        module.fail_json(msg=str(error))
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
