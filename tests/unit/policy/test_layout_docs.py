"""The two maps of the tree say what the tree holds (issue 28): plugins/plugin_utils/README.md names every module of
each package in that package's section and no module that is gone; the README's layout table names every role and
every playbook a user runs."""

from __future__ import annotations

import re

import pytest
from unitlib import REPO

PLUGIN_UTILS = REPO / "plugins" / "plugin_utils"
PACKAGES = ("host", "plan", "texts", "runtime")


def section(text: str, heading: str) -> str:
    """The text under the first ``## heading...`` line, up to the next ``## `` heading."""
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def named_modules(text: str) -> set[str]:
    return set(re.findall(r"`(_[a-z][a-z0-9_]*)`", text))


def layout_row(path: str) -> str:
    readme = (REPO / "README.md").read_text()
    table = section(readme, "Layout of this repository")
    return next(line for line in table.splitlines() if line.startswith(f"| `{path}`"))


def test_the_measure_reads_a_section_and_its_names():
    text = "# t\n## host/: x\n| `_names` | a `_footprint` b |\n## plan/: y\n`_other`\n"
    assert named_modules(section(text, "host/")) == {"_names", "_footprint"}
    assert named_modules(section(text, "plan/")) == {"_other"}


@pytest.mark.parametrize("package", PACKAGES)
def test_the_plugin_utils_readme_names_every_module_of_each_package_and_only_those(package):
    readme = (PLUGIN_UTILS / "README.md").read_text()
    modules = {path.stem for path in (PLUGIN_UTILS / package).glob("_*.py") if path.name != "__init__.py"}
    named = named_modules(section(readme, f"{package}/"))
    assert modules - named == set(), f"plugin_utils/README.md's {package}/ section does not name these modules"
    # Every name is a module of this package (or, in passing, of module_utils: the host half of a check).
    module_utils = {path.stem for path in (REPO / "plugins" / "module_utils").glob("_*.py")}
    assert named - modules - module_utils == set(), f"plugin_utils/README.md's {package}/ section names modules " \
        "that are not this package's"


def test_the_layout_table_names_every_role():
    row = layout_row("roles/")
    roles = {path.name for path in (REPO / "roles").iterdir() if (path / "tasks").is_dir()}
    assert roles == set(re.findall(r"`([a-z_]+)`", row.split("|")[2])), row


def test_the_layout_table_names_every_playbook_a_user_runs():
    """The user's playbooks are the ones the README's playbook table lists as vllm_omni.serve.NAME."""
    readme = (REPO / "README.md").read_text()
    entry_points = set(re.findall(r"^\| `vllm_omni\.serve\.([a-z_]+)` \|", readme, re.MULTILINE))
    assert entry_points and all((REPO / "playbooks" / f"{name}.yml").is_file() for name in entry_points)
    row = layout_row("playbooks/")
    assert entry_points <= set(re.findall(r"`([a-z_]+)`", row.split("|")[2])), row
