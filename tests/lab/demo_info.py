"""Print the demo's router URL, served model name and the CA file clients trust, from the plan of the lab
+ demo inventories (the front door's CA is the collection's own, on this controller)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / ".collection")]

from testlib import load_ansible_inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _names
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

plan = build_plan(load_ansible_inventory([REPO / "inventories/lab/hosts.yml", REPO / "tests/lab/demo/hosts.yml"]),
                  discovery_pending=True)
router = plan["router"]["per_host"][plan["router"]["hosts"][0]]["url"]
print(router, plan["served_model_name"], _names.tls_dir() / "ca.pem")
