"""Galaxy's importer (galaxy_importer.main) with one change: its call to ansible-lint has no time limit.

The importer gives ansible-lint 180 s and logs "Timeout on call to ansible-lint" past that. That limit is sized for
Galaxy's import workers; make test runs the importer at nice 10 on 2 cores beside the lab, where the same lint
(about a minute on an idle 2-core machine) ran past it once with nothing wrong in the collection. Everything else
the importer does is unchanged; the lint's wall time is logged, so a collection that grows towards Galaxy's limit
shows in the log.

Usage (scripts/galaxy-import.sh): python galaxy_importer_untimed.py TARBALL
"""
import runpy
import subprocess
import sys
import time

GALAXY_LINT_LIMIT_S = 180
_communicate = subprocess.Popen.communicate


def _communicate_untimed(self, *args, **kwargs):
    command = self.args if isinstance(self.args, list) else [self.args]
    if kwargs.get("timeout") is None or "ansible-lint" not in command:
        return _communicate(self, *args, **kwargs)
    started = time.monotonic()
    result = _communicate(self, *args, **{**kwargs, "timeout": None})
    print(f"ansible-lint ran {time.monotonic() - started:.0f} s (Galaxy's importer allows {GALAXY_LINT_LIMIT_S} s on its "
          "own workers)", file=sys.stderr)
    return result


subprocess.Popen.communicate = _communicate_untimed
sys.argv = ["galaxy_importer.main", *sys.argv[1:]]
runpy.run_module("galaxy_importer.main", run_name="__main__", alter_sys=True)
