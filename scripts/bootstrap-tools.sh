#!/usr/bin/env bash
# Create the controller tool venv named by $1 from requirements/tools.txt (idempotent).
# Installs Debian's python3-venv first when this Python cannot create venvs (fresh machines), and rsync
# (the controller sends each artifact's first copy with it; the unit tests run a real daemon).
set -euo pipefail
venv=$1
requirements=$(dirname "$0")/../requirements/tools.txt
if ! command -v rsync >/dev/null && [ "$(id -u)" -eq 0 ]; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq rsync >/dev/null
fi
# promtool, for the unit tests that check the alert rules and status queries (Debian's prometheus package,
# unpacked here: nothing is installed on the machine and no service starts).
install_promtool() {
  [ -x "$venv/bin/promtool" ] && return 0
  local work
  work=$(mktemp -d)
  (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1) || { rm -rf "$work"; echo "promtool: apt-get download prometheus failed; its tests will skip" >&2; return 0; }
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  install -m 0755 "$work/root/usr/bin/promtool" "$venv/bin/promtool"
  rm -rf "$work"
}
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
  install_promtool
  exit 0
fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "python3 cannot create virtual environments: install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check uv==0.13.8
"$venv/bin/uv" pip install -q --python "$venv/bin/python" -r "$requirements"
install_promtool
touch "$venv/.complete"
echo "tools ready in $venv"
