"""Helpers shared by the unit and conformance suites."""

from __future__ import annotations

from pathlib import Path

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import inventory_from_hostvars

REPO = Path(__file__).resolve().parents[1]


def load_ansible_inventory(path: Path | list, extra_vars: dict | None = None) -> dict:
    """Planner input from inventory sources, through Ansible's own HostVars (as playbooks see it)."""
    loader = DataLoader()
    sources = [str(p) for p in path] if isinstance(path, list) else [str(path)]
    inventory = InventoryManager(loader=loader, sources=sources)
    variables = VariableManager(loader=loader, inventory=inventory)
    if extra_vars:
        variables._extra_vars = extra_vars
    hostvars = HostVars(inventory=inventory, variable_manager=variables, loader=loader)
    groups = {name: [h.name for h in group.get_hosts()] for name, group in inventory.groups.items()}
    return inventory_from_hostvars(hostvars, groups)
