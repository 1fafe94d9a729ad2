"""The typed setting groups (plan/_setting_groups.py): every field is a deployment setting of the table, a group
is built from the validated settings with lists frozen, and it cannot be changed afterwards."""

from __future__ import annotations

import dataclasses

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _setting_groups, _settings

GROUPS = [value for value in vars(_setting_groups).values()
          if isinstance(value, type) and issubclass(value, _setting_groups._Group) and value is not _setting_groups._Group]


def test_there_are_the_groups_the_planner_reads():
    assert {group.__name__ for group in GROUPS} == {
        "PortSettings", "RouterSettings", "EngineProcessSettings", "KvTransferSettings", "FrontDoorSettings",
        "MasterSettings", "MonitoringSettings"}


@pytest.mark.parametrize("group", GROUPS, ids=lambda group: group.__name__)
def test_every_field_is_a_deployment_setting_of_the_table(group):
    for field in dataclasses.fields(group):
        setting = _settings.BY_NAME.get(group.setting(field.name))
        assert setting is not None, f"{group.__name__}.{field.name}: no setting {group.setting(field.name)}"
        assert setting.scope == _settings.DEPLOYMENT, (group.__name__, field.name, setting.scope)


def test_a_group_is_built_from_the_settings_frozen():
    settings = {group.setting(field.name): None for group in GROUPS for field in dataclasses.fields(group)}
    settings.update(vllm_omni_mooncake_master_enabled=True, vllm_omni_mooncake_master_rpc_port=50051,
                    vllm_omni_mooncake_master_metrics_port=9003, vllm_omni_install_root="/opt/vllm-omni",
                    vllm_omni_stage_zmq_port_range=[20000, 29999])
    master = _setting_groups.MasterSettings.of(settings)
    assert (master.enabled, master.rpc_port, master.metrics_port, master.install_root) == (
        True, 50051, 9003, "/opt/vllm-omni")
    assert _setting_groups.PortSettings.of(settings).stage_zmq_port_range == (20000, 29999)
    with pytest.raises(dataclasses.FrozenInstanceError):
        master.rpc_port = 1
