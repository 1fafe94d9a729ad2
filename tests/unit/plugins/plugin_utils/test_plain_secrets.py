"""A secret written in plain text in the inventory's own files is named (file and variable, never the value); a
vaulted file, an inline !vault value and a reference to a vaulted variable are not."""

from __future__ import annotations

import json

from ansible_collections.vllm_omni.serve.plugins.action import secrets_check
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _plain_secrets

NAMES = (*secrets_check.SECRET_VARIABLES, "vllm_omni_api_keys")
KEY = "plain-key-0123456789abcdef"
VAULTED_FILE = "$ANSIBLE_VAULT;1.1;AES256\n6136353833363437\n"
INLINE = ("vllm_omni_api_key: !vault |\n"
          "  $ANSIBLE_VAULT;1.1;AES256\n"
          "  61363538333634373833\n")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_each_plain_secret_is_named_by_file_and_variable_and_the_vaulted_ones_are_not(tmp_path):
    inventory = tmp_path / "prod"
    write(inventory / "hosts.yml", "all:\n  children:\n    vllm_omni:\n      hosts:\n        gpu-1:\n"
                                   f"          vllm_omni_hf_token: hf_{'a' * 30}\n")
    write(inventory / "group_vars" / "all" / "main.yml", f"vllm_omni_api_key: {KEY}\nvllm_omni_gpus: [0, 1]\n")
    write(inventory / "group_vars" / "all" / "vault.yml", VAULTED_FILE)
    write(inventory / "group_vars" / "vllm_omni.yml", INLINE)
    write(inventory / "group_vars" / "routers.json", json.dumps({"vllm_omni_api_keys": ["{{ vault_old }}", KEY]}))
    write(inventory / "host_vars" / "gpu-2", 'vllm_omni_api_key: "{{ vault_vllm_omni_api_key }}"\n')
    write(inventory / "group_vars" / "empty.yml", "vllm_omni_api_key: ''\n")
    found = _plain_secrets.plain_text_findings([str(inventory)], NAMES, tmp_path)
    assert found == [("prod/hosts.yml", "vllm_omni_hf_token"), ("prod/group_vars/all/main.yml", "vllm_omni_api_key"),
                     ("prod/group_vars/routers.json", "vllm_omni_api_keys")]
    message = _plain_secrets.warning(*found[1])
    assert KEY not in message and "ansible-vault encrypt prod/group_vars/all/main.yml" in message
    assert '"{{ vault_vllm_omni_api_key }}"' in message


def test_a_file_source_reads_its_own_directorys_vars_and_nothing_breaks_on_odd_files(tmp_path):
    hosts = write(tmp_path / "inv" / "hosts.yml", "all:\n  hosts:\n    gpu-1:\n")
    write(tmp_path / "inv" / "group_vars" / "all.yml", f"vllm_omni_api_key: {KEY}\n")
    write(tmp_path / "inv" / "group_vars" / "broken.yml", "vllm_omni_api_key: [unclosed\n")  # Ansible says why
    write(tmp_path / "inv" / "group_vars" / "notes.txt", f"vllm_omni_api_key: {KEY}\n")  # Ansible does not read it
    write(tmp_path / "inv" / "group_vars" / "tagged.yml", "other: !unsafe '{{ x }}'\nlist: !unsafe [1]\n")
    assert _plain_secrets.plain_text_findings([str(hosts), str(tmp_path / "missing"), "ec2.py"], NAMES) == [
        (str(tmp_path / "inv" / "group_vars" / "all.yml"), "vllm_omni_api_key")]
    # The same directory given twice (a file and its directory) names each file once.
    assert len(_plain_secrets.plain_text_findings([str(hosts), str(tmp_path / "inv")], NAMES)) == 1


def test_the_deploys_secrets_check_warns_with_the_file_and_passes(tmp_path, monkeypatch):
    write(tmp_path / "inv" / "group_vars" / "all.yml", f"vllm_omni_api_key: {KEY}\n")
    action = object.__new__(secrets_check.ActionModule)
    action._task = type("Task", (), {"args": {"hosts": ["gpu-1"], "required": True}})()
    said = []
    action._display = type("Display", (), {"warning": lambda self, text: said.append(text)})()
    monkeypatch.setattr(secrets_check.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.chdir(tmp_path)
    result = action.run(task_vars={"hostvars": {"gpu-1": {"vllm_omni_api_key": KEY}},
                                   "ansible_inventory_sources": [str(tmp_path / "inv")]})
    assert not result.get("failed") and result["plain_text"] == [
        {"file": "inv/group_vars/all.yml", "variable": "vllm_omni_api_key"}]
    assert len(said) == 1 and said[0].startswith("vllm_omni_api_key is plain text in inv/group_vars/all.yml")
    assert KEY not in json.dumps(result) + said[0]
