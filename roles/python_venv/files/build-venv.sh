# shellcheck shell=bash
# Run by the venv_build action with /bin/bash. Build $PYTHON_VENV_PATH.new, install the pinned packages,
# verify every pin, then swap it in, so a failed install never leaves a half-built venv where a
# working one was. Each step is noted in $PROGRESS_FILE (when set), which the action prints with the
# bytes written so far against "expect BYTES" (the wheels' unpacked size).
set -euo pipefail
note() { if [ -n "${PROGRESS_FILE:-}" ]; then printf '%s\n' "$*" >> "$PROGRESS_FILE"; fi; }
# One build at a time in the venvs' directory: a build an interrupted deploy left running (the action starts
# it in one task and waits in the next; the controller may go away between them) ends before this one starts
# over. The lock is the directory itself (made here on a first build, as the venv's own would make it):
# nothing is left behind for the footprint to find.
mkdir -p "${PYTHON_VENV_PATH%/*}"
exec 9<"${PYTHON_VENV_PATH%/*}"
if ! flock --nonblock 9; then
  note "waiting for an earlier build in ${PYTHON_VENV_PATH%/*} to end"
  flock 9
fi
new="$PYTHON_VENV_PATH.new"
rm -rf "$new"
# Unpack on the venv's filesystem: /tmp is often a small tmpfs, and an engine venv unpacks to ~8 GB.
export TMPDIR="$PYTHON_VENV_PATH.tmp"
rm -rf "$TMPDIR"; mkdir -p "$TMPDIR"
# On any failure the half-built venv goes too; the working one was never touched (uv builds beside it).
trap 'rm -rf "$TMPDIR"; if [ "$new" != "$PYTHON_VENV_PATH" ]; then rm -rf "$new"; fi' EXIT
read -r -a packages <<< "$PYTHON_VENV_PACKAGES"
index=()
if [ -n "$PYTHON_VENV_FIND_LINKS" ]; then index=(--no-index --find-links "$PYTHON_VENV_FIND_LINKS"); fi
# Exactly the lock: every package pinned, every file's sha256 checked (a wheel that is not the locked
# one is refused), nothing resolved beyond it.
locked=(--require-hashes --no-deps --requirement "$PYTHON_VENV_LOCK")
if [ -n "$PYTHON_VENV_FIND_LINKS" ]; then
  # What the venv will hold: every wheel's unpacked size (read from the zip directories, quick).
  note "expect $("$PYTHON_VENV_PYTHON" - "$PYTHON_VENV_FIND_LINKS" <<'PY'
import pathlib, sys, zipfile
print(sum(entry.file_size for wheel in pathlib.Path(sys.argv[1]).glob("*.whl")
          for entry in zipfile.ZipFile(wheel).infolist()))
PY
)"
fi
pins=$(grep -c '==' "$PYTHON_VENV_LOCK" || true)
note "creating the venv"
if [ "$PYTHON_VENV_INSTALLER" = uv ]; then
  # Relocatable: entry points find their interpreter relative to themselves, so the rename below is safe.
  "$PYTHON_VENV_UV" venv --quiet --relocatable --python "$PYTHON_VENV_PYTHON" "$new"
  note "installing $pins locked packages"
  # Bytecode compiled now: the services run as users who cannot write the venv, so a venv without it
  # would have every process compile everything it imports at every start.
  "$PYTHON_VENV_UV" pip install --quiet --no-cache --compile-bytecode --python "$new/bin/python" "${index[@]}" \
    "${locked[@]}"
else
  # pip venvs are not relocatable: build in place (the old venv is gone while this runs).
  new="$PYTHON_VENV_PATH"
  rm -rf "$new"
  "$PYTHON_VENV_PYTHON" -m venv "$new"
  note "installing $pins locked packages"
  "$new/bin/python" -m pip install --quiet --disable-pip-version-check "${index[@]}" "${locked[@]}"
fi
note "checking every pin"
"$new/bin/python" - "${packages[@]}" <<'PY'
import importlib.metadata, sys
wrong = []
for pin in sys.argv[1:]:
    name, _, version = pin.partition("==")
    try:
        found = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found != version:
        wrong.append(f"{name}: wanted {version}, found {found}")
if wrong:
    sys.exit("pinned packages not installed as pinned: " + "; ".join(wrong))
PY
printf '%s\n' "$PYTHON_VENV_MARKER" > "$new/.vllm-omni-serve.json"
note "swapping it in"
if [ "$new" != "$PYTHON_VENV_PATH" ]; then
  rm -rf "$PYTHON_VENV_PATH.old"
  if [ -e "$PYTHON_VENV_PATH" ]; then mv "$PYTHON_VENV_PATH" "$PYTHON_VENV_PATH.old"; fi
  mv "$new" "$PYTHON_VENV_PATH"
  rm -rf "$PYTHON_VENV_PATH.old"
fi
