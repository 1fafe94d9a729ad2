"""Issue 28: roles and playbooks spell no unit name, fixed path or URL suffix that the plan owns.

The plan (``plugins/plugin_utils/host/_names.py`` through the planner) has every unit, fixed path and whole
URL (``health_url``, ``readiness_url``, ``metrics_url``, ``ready_url``). A role that writes ``{{ url }}/health``
or ``/etc/nginx/vllm-omni`` would be a second home for it. Read from the YAML's values (task names,
descriptions and messages are prose and may mention them) and from the templates' text.
"""

from __future__ import annotations

import re

import pytest
import yaml
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _names

URL_SUFFIX = re.compile(r"/(health|readiness|metrics)\b|/-/ready\b")
# A path spelled onto the controller's cache (its layout is the plan's artifacts.controller and each artifact's
# controller_dir / controller_manifest, joined with path_join).
CACHE_SPELLED = re.compile(r"controller_cache\s*~|controller_cache\s*}}/")
# The controller cache's own directory: only the controller_cache lookup (host/_names.cache_root) spells it.
CACHE_ROOT_SPELLED = re.compile(r"\.cache/vllm-omni-serve|['\"]VLLM_OMNI_CACHE['\"]")
PROSE_KEYS = {"description", "short_description", "msg", "fail_msg", "success_msg"}


def owned_names() -> dict[str, str]:
    """_names' constants that are a unit name or an absolute path of at least two parts."""
    return {name: value for name, value in vars(_names).items()
            if name.isupper() and isinstance(value, str)
            and (value.endswith(".service") or (value.startswith("/") and value.count("/") > 1))}


def values(node, key=None, listed=False):
    """(key, string) of every string value in a YAML document, prose left out: messages, descriptions and the
    ``name`` of a list's items (a task's, a play's, a loop item's); a module's ``name`` option is read."""
    if isinstance(node, dict):
        for child_key, child in node.items():
            if not (listed and child_key == "name"):
                yield from values(child, child_key)
    elif isinstance(node, list):
        for child in node:
            yield from values(child, key, listed=True)
    elif isinstance(node, str) and key not in PROSE_KEYS:
        yield key, node


def spelled(text: str, owned: dict[str, str]) -> list[str]:
    found = [f"{name} ({value})" for name, value in owned.items() if value in text]
    return (found + [f"URL suffix {match.group(0)}" for match in URL_SUFFIX.finditer(text)]
            + [f"cache path {match.group(0)}" for match in CACHE_SPELLED.finditer(text)]
            + [f"cache root {match.group(0)}" for match in CACHE_ROOT_SPELLED.finditer(text)])


def yaml_files() -> list:
    return sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml"),
                   *REPO.glob("roles/*/vars/*.yml"), *REPO.glob("roles/*/defaults/*.yml"), *REPO.glob("playbooks/*.yml"),
                   *REPO.glob("playbooks/vars/*.yml")])


def test_the_measure_finds_what_it_looks_for():
    owned = owned_names()
    assert "ROUTER_UNIT" in owned and "FRONTDOOR_CONFIG" in owned and "HEALTH_PATH" not in owned
    task = yaml.safe_load(
        "- name: Front door | /readiness over TLS\n"
        "  ansible.builtin.uri:\n"
        "    url: \"{{ plan.router.per_host[host].url }}/readiness\"\n"
        "- ansible.builtin.systemd_service: {name: vllm-omni-router.service}\n")
    seen = [f"{key}: {what}" for key, text in values(task) for what in spelled(text, owned)]
    # The first task's name is prose; the second's systemd_service name is the module's option.
    assert seen == ["url: URL suffix /readiness", "name: ROUTER_UNIT (vllm-omni-router.service)"]
    assert spelled("systemctl restart vllm-omni-router.service", owned) == [
        "ROUTER_UNIT (vllm-omni-router.service)"]
    assert spelled("{{ artifacts_controller_cache ~ '/artifacts/' ~ item.id }}", owned) == [
        "cache path controller_cache ~"]
    assert spelled("{{ [artifacts_controller_cache, item.controller_manifest] | ansible.builtin.path_join }}", owned) == []
    assert spelled("{{ lookup('ansible.builtin.env', 'VLLM_OMNI_CACHE') ~ '/reports' }}", owned) == [
        "cache root 'VLLM_OMNI_CACHE'"]
    assert spelled("{{ lookup('ansible.builtin.env', 'HOME') ~ '/.cache/vllm-omni-serve' }}", owned) == [
        "cache root .cache/vllm-omni-serve"]
    assert spelled("{{ lookup('vllm_omni.serve.controller_cache', plan.artifacts.controller.reports_dir) }}", owned) == []


@pytest.mark.parametrize("path", yaml_files(), ids=lambda path: path.relative_to(REPO).as_posix())
def test_roles_and_playbooks_read_names_and_urls_from_the_plan(path):
    owned = owned_names()
    found = [f"{key}: {what}" for document in yaml.safe_load_all(path.read_text())
             for key, text in values(document) for what in spelled(text, owned)]
    assert found == [], f"read these from vllm_omni_plan instead: {found}"


def test_templates_read_names_and_urls_from_the_plan():
    owned = owned_names()
    templates = sorted(REPO.glob("roles/*/templates/*"))
    found = {path.relative_to(REPO).as_posix(): spelled(path.read_text(), owned) for path in templates}
    assert templates and {path: what for path, what in found.items() if what} == {}


# A setting is read by string key in the planner only (plugins/plugin_utils/plan/, which validates it and puts its
# normalised value in a plan section); what runs after it reads the sections (issue 42: one source of truth).
SETTINGS_READ = re.compile(r"""plan\w*\[["']settings["']\]|plan\w*\.get\(["']settings|plan\w*\.settings\b""")


def test_nothing_after_the_planner_reads_a_setting_from_the_plans_settings():
    readers = [path for directory in ("plugins", "roles", "playbooks", "molecule")
               for path in sorted((REPO / directory).rglob("*"))
               if path.suffix in (".py", ".yml", ".yaml", ".j2") and path.is_file()
               and "plugin_utils/plan/" not in path.as_posix()]
    found = [f"{path.relative_to(REPO)}:{number}" for path in readers
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if SETTINGS_READ.search(line)]
    assert len(readers) > 100 and found == [], found
