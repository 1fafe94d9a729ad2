"""Write (or --check) the RECORD of the collection's engine plugin, roles/engine/files/engine_plugin/.

The engine role copies that directory into an engine venv's site-packages as it is, so the directory is an
installed distribution: its ``*.dist-info/RECORD`` lists every file with its sha256 and size, and the role's
``python -m vllm_omni_serve_fixes --verify`` checks the installed files against it. The revision is one number
in four places that must agree: the module's ``REVISION``, the dist-info's name and ``METADATA`` version, and
``engine_plugin.revision`` of each version in data/support.yml that carries the plugin.

  python scripts/engine_plugin.py           rewrite RECORD after changing a file (bump the revision too)
  python scripts/engine_plugin.py --check   fail if RECORD or a revision is out of date (make lint)
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "roles" / "engine" / "files" / "engine_plugin"
SUPPORT = REPO / "data" / "support.yml"
NAME = "vllm_omni_serve_engine"


def dist_info() -> Path:
    found = sorted(PLUGIN.glob(f"{NAME}-*.dist-info"))
    if len(found) != 1:
        sys.exit(f"{PLUGIN}: expected one {NAME}-<revision>.dist-info, found {[p.name for p in found]}")
    return found[0]


def record(info: Path) -> str:
    """RECORD as pip writes it: path,sha256=<urlsafe base64, unpadded>,size; RECORD itself with no hash."""
    rows = []
    for path in sorted(p for p in PLUGIN.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        relative = path.relative_to(PLUGIN).as_posix()
        if path == info / "RECORD":
            continue
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{relative},sha256={digest},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    return "\n".join(rows) + "\n"


def revision_problems(info: Path) -> list[str]:
    problems = []
    revision = info.name[len(NAME) + 1:-len(".dist-info")]
    module = re.search(r"^REVISION = (\d+)$", (PLUGIN / "vllm_omni_serve_fixes.py").read_text(), re.MULTILINE)
    if not module or module.group(1) != revision:
        problems.append(f"vllm_omni_serve_fixes.REVISION is {module and module.group(1)}, the dist-info {revision}")
    metadata = re.search(r"^Version: (\S+)$", (info / "METADATA").read_text(), re.MULTILINE)
    if not metadata or metadata.group(1) != revision:
        problems.append(f"{info.name}/METADATA says version {metadata and metadata.group(1)}, not {revision}")
    for version, row in yaml.safe_load(SUPPORT.read_text())["versions"].items():
        plugin = row.get("engine_plugin")
        if plugin and str(plugin.get("revision")) != revision:
            problems.append(f"data/support.yml {version}: engine_plugin.revision {plugin.get('revision')}, "
                            f"the plugin is revision {revision}")
    return problems


def main() -> int:
    info = dist_info()
    wanted = record(info)
    path = info / "RECORD"
    problems = revision_problems(info)
    if "--check" in sys.argv[1:]:
        if not path.is_file() or path.read_text() != wanted:
            problems.append(f"{path.relative_to(REPO)} is out of date: run python scripts/engine_plugin.py "
                            "(and bump the revision if a file changed since the last release)")
    else:
        path.write_text(wanted)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
