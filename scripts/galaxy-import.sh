#!/usr/bin/env bash
# Galaxy's importer on the collection tarball, as galaxy.ansible.com would run it on upload:
#   scripts/galaxy-import.sh CACHE_DIR
# Builds the tarball from this checkout (galaxy.yml's build_ignore applies), runs galaxy-importer
# (pinned: requirements/galaxy-importer.txt) with scripts/galaxy-importer.cfg, and fails on an import
# error or on any warning the importer reports (ansible-lint findings, documentation problems), so
# what Galaxy would show as a blemish fails here first. The importer runs without its 180 s limit on ansible-lint
# (scripts/galaxy_importer_untimed.py says why) and the lint's wall time is printed.
set -euo pipefail
cache=$(realpath -m "$1")
repo=$(cd "$(dirname "$0")/.." && pwd)
requirements="$repo/requirements/galaxy-importer.txt"
venv="$cache/venv-$(sha256sum "$requirements" | cut -c1-12)"
uv=$(command -v uv) || { echo "uv is not on PATH (run through make: the tool venv has it)" >&2; exit 1; }
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  "$uv" venv -q --python python3.11 "$venv"
  "$uv" pip install -q --python "$venv/bin/python" -r "$requirements"
  touch "$venv/.complete"
fi
build="$cache/build"
rm -rf "$build" && mkdir -p "$build/tmp"
(cd "$repo" && "$venv/bin/ansible-galaxy" collection build --force --output-path "$build" >/dev/null)
tarball=$(ls "$build"/*.tar.gz)
log="$build/import.log"
status=0
# The importer's ansible-lint and ansible-doc must see only the tarball, not this checkout's config.
(cd "$build/tmp" && env -u ANSIBLE_CONFIG HOME="$build/tmp" GALAXY_IMPORTER_CONFIG="$repo/scripts/galaxy-importer.cfg" \
  GALAXY_IMPORTER_TMP_ROOT_DIR="$build/tmp" PATH="$venv/bin:$PATH" \
  "$venv/bin/python" "$repo/scripts/galaxy_importer_untimed.py" "$tarball" > "$log" 2>&1) || status=$?
warnings=$(grep -cE '^(WARNING|ERROR)' "$log" || true)
if [ "$status" -ne 0 ] || [ "$warnings" -ne 0 ]; then
  grep -E '^(WARNING|ERROR)|Traceback|Error' "$log" | head -40 >&2
  echo "galaxy-importer: exit $status, $warnings warning/error line(s); the whole log: $log" >&2
  exit 1
fi
grep -h '^ansible-lint ran' "$log" || true
echo "galaxy-importer: $(basename "$tarball") imports cleanly ($(grep -c . "$log") log lines, 0 warnings; log: $log)"
