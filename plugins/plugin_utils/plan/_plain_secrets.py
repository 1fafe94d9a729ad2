# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Secrets written in plain text in the inventory's own files: a warning naming the file and the variable.

Ansible gives a play the decrypted value of a secret wherever it came from, so only the files tell a vaulted key
from one anyone who reads the inventory can use. Read here, on the controller, for each inventory source: the
source itself (a YAML or JSON inventory, or the files of an inventory directory) and its group_vars/ and
host_vars/ (files, or directories of files, as Ansible loads them). A value is plain when it is a string that is
neither in a vault-encrypted file nor an inline ``!vault`` string nor a template that refers to another variable
(``"{{ vault_vllm_omni_api_key }}"``, the usual indirection to a vaulted file). Never a value in what it returns.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

VAULT_HEADER = "$ANSIBLE_VAULT;"
VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")  # what Ansible reads in group_vars/ and host_vars/
INVENTORY_SUFFIXES = (".yml", ".yaml", ".json")  # the inventory files whose vars are read here (not INI)
MAX_FILES = 2000  # an inventory directory is a few dozen files; a mistaken source (/) is not walked whole


class _Encrypted:
    """An inline ``!vault`` value (or any other Ansible tag on a scalar): not plain text."""


class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """YAML as Ansible writes it: its ``!vault`` and ``!unsafe`` tags load as markers, not as errors."""


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> object:
    return _Encrypted() if suffix == "vault" else (loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode)
                                                   else None)


_Loader.add_multi_constructor("!", _tagged)


def _load(path: Path) -> object:
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith(VAULT_HEADER):
        return None  # the whole file is vaulted
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader plus markers
    except (ValueError, yaml.YAMLError):
        return None  # not ours to judge: Ansible says what is wrong with it


def _plain(value: object) -> bool:
    if isinstance(value, str):
        return bool(value.strip()) and "{{" not in value
    if isinstance(value, list):
        return any(_plain(item) for item in value)
    return False


def _found_in(data: object, names: tuple[str, ...]) -> list[str]:
    """The secret variables set in plain text anywhere in ``data`` (a vars file, or an inventory's vars blocks)."""
    found: list[str] = []
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in names and _plain(value):
                    found.append(key)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, (dict, list)))
    return sorted(set(found))


def _vars_files(directory: Path) -> list[Path]:
    files = []
    for kind in ("group_vars", "host_vars"):
        base = directory / kind
        if base.is_dir():
            files += [path for path in sorted(base.rglob("*"))
                      if path.is_file() and path.suffix in VARS_SUFFIXES and not path.name.startswith(".")]
    return files


def _inventory_files(source: Path) -> tuple[list[Path], Path]:
    """The inventory files of one source and the directory its group_vars/ and host_vars/ sit in."""
    if source.is_dir():
        return [p for p in sorted(source.iterdir()) if p.is_file() and p.suffix in INVENTORY_SUFFIXES], source
    return ([source] if source.suffix in INVENTORY_SUFFIXES else []), source.parent


def plain_text_findings(sources: list[str], names: tuple[str, ...], base: Path | None = None) -> list[tuple[str, str]]:
    """(file, variable) for each secret variable set in plain text in the files of the inventory ``sources``;
    the files are shown relative to ``base`` (the working directory) where they are under it."""
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            continue  # a dynamic or missing source: nothing of ours to read
        inventory, directory = _inventory_files(path)
        files += inventory + _vars_files(directory)
    findings, seen = [], set()
    for path in files[:MAX_FILES]:
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        shown = str(path)
        if base is not None and resolved.is_relative_to(base.resolve()):
            shown = str(resolved.relative_to(base.resolve()))
        findings += [(shown, name) for name in _found_in(_load(path), names)]
    return findings


def warning(path: str, variable: str) -> str:
    return (f"{variable} is plain text in {path}: anyone who can read the inventory can use it. Encrypt the file "
            f"(ansible-vault encrypt {path}) or the value (ansible-vault encrypt_string --name {variable}), or refer "
            f"to a vaulted variable ({variable}: \"{{{{ vault_{variable} }}}}\"); docs/security.md")
