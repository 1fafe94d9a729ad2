"""The health wait's phase reader (plugin_utils/runtime/_progress.py: engine_phase) over a device run's engine
logs: each line where the phase it reports changes, in order. Run on the device machine after
``pd_serving.sh run`` (the logs are in /srv/stage/logs)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
# Loaded from its file: the device copy of the checkout has no .collection link (only stdlib inside).
_spec = importlib.util.spec_from_file_location("progress", REPO / "plugins/plugin_utils/runtime/_progress.py")
progress = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(progress)


def main(logs: pathlib.Path) -> None:
    for path in sorted(p for p in logs.glob("*.log") if not p.name.endswith(".tail.log")):
        # Split at newlines only, as journald does: a tqdm bar's carriage-return updates stay one line.
        lines = path.read_bytes().decode(errors="replace").split("\n")
        print(f"===== {path.name}: {len(lines)} lines")
        last = None
        for number, line in enumerate(lines, 1):
            phase = progress.engine_phase([line])
            if phase and phase != last:
                print(f"{number:5d} {phase:40s} | {progress.plain_log_line(line, 160)}")
                last = phase


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/srv/stage/logs"))
