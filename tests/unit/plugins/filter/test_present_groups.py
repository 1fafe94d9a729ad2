"""present_groups: a play's pattern over the collection's groups, without the groups the inventory lacks."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.filter.present_groups import present_groups

GROUPS = {"all": ["a", "b"], "ungrouped": [], "vllm_omni": ["a", "b"], "vllm_omni_planned_router": ["a"]}


def test_only_the_groups_the_inventory_has_stay_in_their_order():
    pattern = "vllm_omni:vllm_omni_planned_router:vllm_omni_planned_master:vllm_omni_planned_monitoring"
    assert present_groups(pattern, GROUPS) == "vllm_omni:vllm_omni_planned_router"


def test_none_present_is_a_pattern_of_no_host_that_ansible_does_not_warn_about():
    assert present_groups("vllm_omni_planned_master:vllm_omni_monitoring", GROUPS) == "all:!all"


@pytest.mark.parametrize(("pattern", "groups"), [("vllm_omni:!gpu-a", GROUPS), ("a&b", GROUPS), (["vllm_omni"], GROUPS),
                                                 ("vllm_omni", ["vllm_omni"])])
def test_anything_but_a_union_of_group_names_and_the_groups_variable_is_refused(pattern, groups):
    with pytest.raises(AnsibleFilterError, match="present_groups: expects"):
        present_groups(pattern, groups)
