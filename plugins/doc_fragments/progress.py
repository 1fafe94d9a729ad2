# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The modules whose actions print progress lines while they wait; a module's own entry for an option wins
    (artifact_pull's own default)."""

    # vllm_omni.serve.progress
    DOCUMENTATION = r"""
options:
  progress_interval:
    description: Seconds between progress lines.
    type: int
    default: 15
"""
