#!/usr/bin/env bash
# Run ansible-test on this checkout:  scripts/ansible-test.sh CACHE_DIR sanity|units [ARGS...]
#
# ansible-test wants the collection at .../ansible_collections/vllm_omni/serve/ and, for each sanity
# test, makes a venv it bootstraps with get-pip.py from ci-files.testing.ansible.com, a host this
# machine (and many CI networks) cannot reach. So:
#   * the checkout's files (what git tracks, plus untracked files git does not ignore) are copied to
#     CACHE_DIR/tree/ansible_collections/vllm_omni/serve/ (replaced on every run);
#   * ansible-test runs from CACHE_DIR/venv-<hash of requirements/ansible-test.txt> (pinned), with
#     HOME=CACHE_DIR/home, where the bootstrap script it would download is already in its cache: a
#     stand-in that makes pip with Python's own ensurepip, then installs the pip ansible-test asked for
#     from the package index. Everything else (the sanity pins, from ansible-test's own requirement
#     files) comes from the package index as usual. The user's own ~/.ansible is not touched.
set -euo pipefail
cache=$(realpath -m "$1"); command=$2; shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
requirements="$repo/requirements/ansible-test.txt"
venv="$cache/venv-$(sha256sum "$requirements" | cut -c1-12)"
uv=$(command -v uv) || { echo "uv is not on PATH (run through make: the tool venv has it)" >&2; exit 1; }

if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$uv" pip install -q --python "$venv/bin/python" -r "$requirements"
  touch "$venv/.complete"
fi

# The bootstrap stand-in, under the name ansible-test looks for (get_pip_<its pip version>.py).
pip_version=$("$venv/bin/python" - <<'PY'
import pathlib, re, ansible_test
source = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
found = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", source.read_text())
print(found.group(1) if found else "")
PY
)
[ -n "$pip_version" ] || { echo "cannot tell which pip this ansible-test bootstraps (requirements/ansible-test.txt changed?)" >&2; exit 1; }
home="$cache/home"
mkdir -p "$home/.ansible/test/cache"
cat > "$home/.ansible/test/cache/get_pip_${pip_version//./_}.py" <<'PY'
"""Stand-in for get-pip.py (scripts/ansible-test.sh): Python's ensurepip, then the pip asked for."""
import subprocess
import sys

options = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *options],
                        check=False).returncode)
PY

tree="$cache/tree/ansible_collections/vllm_omni/serve"
rm -rf "$cache/tree"
mkdir -p "$tree"
# Files deleted in the working tree but still in the index are left out.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | python3 -c 'import os, sys; sys.stdout.write("".join(f + "\0" for f in sys.stdin.read().split("\0") if f and os.path.lexists(f)))' \
  | tar --null --no-recursion -cf - -T -) | tar -xf - -C "$tree"

# The shellcheck sanity test is skipped with a warning when shellcheck is missing: install it (Debian).
if [ "$command" = sanity ] && ! command -v shellcheck >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    # make test runs this beside the lab, which may install host packages too: wait for the dpkg lock.
    apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq shellcheck >/dev/null
  else
    echo "shellcheck is not installed: the shellcheck sanity test needs it (apt-get install shellcheck)" >&2; exit 1
  fi
fi

cd "$tree"
export HOME="$home" PATH="$venv/bin:$PATH"
unset ANSIBLE_CONFIG  # the collection's ansible.cfg points into the checkout; ansible-test sets its own
exec ansible-test "$command" --python 3.11 --color no "$@"
