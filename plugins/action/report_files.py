# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Controller-side action for vllm_omni.serve.report_files (documentation in plugins/modules)."""

from __future__ import annotations

import json
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    REPORT_FILES,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:  # the documents (plans, reports) are type-checked, not copied
            args = checked_options(REPORT_FILES, self._task.args, large=("documents",))
        except OptionsError as error:
            raise AnsibleActionFail(refusal("controller (localhost)", "report_files", error)) from None
        directory, documents = Path(args["dest"]), args["documents"]
        # --check writes nothing anywhere, the controller included: the reports are then only named.
        check = bool(self._task.check_mode)
        written = []
        try:
            if not check:
                directory.mkdir(parents=True, exist_ok=True)
            for name, document in sorted(plain(documents).items()):
                if "/" in name or name.startswith("."):
                    raise AnsibleActionFail(f"report_files: {name!r} is not a plain file name")
                path = directory / f"{name}.json"
                if not check:
                    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
                written.append(str(path))
        except OSError as error:
            raise AnsibleActionFail(f"report_files: {error}") from None
        # Reports on the controller, not a managed change.
        result.update(changed=False, files=written, written=not check)
        return result
