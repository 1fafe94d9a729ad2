# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The attributes most of the collection's modules share; a module's own entry for an attribute wins."""

    # vllm_omni.serve.attributes: no module of ours shows a diff but plan_files (which says so itself).
    DOCUMENTATION = r"""
attributes:
  diff_mode:
    support: none
    description: Shows no diff.
"""

    # vllm_omni.serve.attributes.read_only: modules that only look (facts, checks): check mode runs them as is.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Shows no diff.
"""
