#!/usr/bin/env bash
# make test's orchestration (tests/README.md): the lab chain, the checks chain beside it, the lab's cache filler
# beside both; one summary line and the exit status of both chains. Run through `make test` (it provides the tool
# venv on PATH and exports VLLM_OMNI_CACHE, PYTHONPYCACHEPREFIX and ANSIBLE_CONFIG).
#   MAKE                 the make that called us (make test passes $(MAKE))
#   VLLM_OMNI_CACHE      the cache directory
#   LAB_ENGINE_VERSIONS  engine venvs the lab reads; on CI the others are removed once the checks are done
set -euo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
cache=${VLLM_OMNI_CACHE:?run through make test}
lab_engines=${LAB_ENGINE_VERSIONS:-0.26.0}

busy_seconds() {  # CPU-seconds every core of this machine spent busy since boot (user, nice, system, irq, softirq)
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / {printf "%.0f %.0f\n", ($2 + $3 + $4 + $7 + $8) / hz, $5 / hz}' /proc/stat
}
read -r busy_before idle_before < <(busy_seconds)
started=$(date +%s)

warm_log=$(mktemp)
nice -n 10 python tests/lab/warm.py > "$warm_log" 2>&1 &
warm_pid=$!

# The checks chain, at nice 10: the lab chain decides make test's time, so the checks take the CPU whenever the
# lab waits on its machines. Lint is one of them for that reason: a lint failure still fails make test, at the end.
checks_log=$(mktemp)
(
  checks_rc=0
  SECONDS=0
  nice -n 10 "$make" --no-print-directory -k test-checks > "$checks_log" 2>&1 || checks_rc=$?
  echo "$checks_rc" > "$checks_log.rc"
  # CPU of the chain and everything it waited for: `times`' second line, this shell's children (not in a pipe or
  # $(...), whose own subshell has no children).
  times > "$checks_log.times"
  echo "== checks chain: ${SECONDS} s; CPU of its processes (user, system): $(tail -1 "$checks_log.times")" >> "$checks_log"
  if [ -n "${CI:-}" ]; then  # a clean clone: its caches go with it, and the lab needs the disk
    rm -rf "$cache/uv-cache"
    for engine in "$cache"/engines/*; do
      case " $lab_engines " in *" ${engine##*/} "*) ;; *) rm -rf "$engine" "$cache/pycache$engine" ;; esac
    done
  fi
  touch "$checks_log.done"
) &
checks_pid=$!

lab_status=0
"$make" --no-print-directory test-lab LAB_AFTER="$checks_log.done" || lab_status=$?
wait "$checks_pid" || true
wait "$warm_pid" || true

echo "== the lab's caches (tests/lab/warm.py, ran beside the lab):"
cat "$warm_log"
echo "== lint, sanity, units, galaxy, conformance (ran beside the lab):"
cat "$checks_log"
checks_status=$(cat "$checks_log.rc")
rm -f "$warm_log" "$checks_log" "$checks_log.rc" "$checks_log.done" "$checks_log.times"
read -r busy_after idle_after < <(busy_seconds)
echo "== make test: $(($(date +%s) - started)) s; this machine's cores busy $((busy_after - busy_before)) CPU-s," \
  "idle $((idle_after - idle_before)) s (the lab machines' processes included)"
echo "== lab: exit $lab_status; lint, sanity, units, galaxy, conformance: exit $checks_status"
[ "$lab_status" -eq 0 ] && [ "$checks_status" -eq 0 ]
