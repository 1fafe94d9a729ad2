#!/usr/bin/env bash
# The device side of the real-GPU PD run (issue 11; record/gpu-evidence.md), called through the device
# tool's `run` from the repository root, after tests/device/prepare.sh built .device/ here:
# DEVICE_PAYLOAD names the payload's manifest: tests/device/payload.json (vLLM-Omni 0.26.0, the default) or
# tests/device/payload-0.30.0.json (0.30.0, with torch 2.13 and what it links).
#   tests/device/pd_serving.sh stage FILE...          keep carried files in /srv/stage/in; one 40 MiB
#                                                      part per call (the tool carries 64 MiB), calls back
#                                                      to back (the machine is given back after 30 s idle)
#   tests/device/pd_serving.sh imports NAME=RENDER[:sandbox]
#                                                      unpack, set up that render's venv, compare it with the
#                                                      lock, import the engine (as the unit's user, sandboxed)
#   tests/device/pd_serving.sh run [--compile-bytecode] [--ready-timeout S] NAME=RENDER[:stock|:sandbox]...
#                                                      unpack once, then serve and measure each scenario
#                                                      (tests/device/pd_serving.py); results land in $OUT
#   tests/device/pd_serving.sh bench [--spec JSON] [--fault STAGE [--restart-after-fault]] [--no-grid] NAME=RENDER...
#                                                      the bench harness (vllm bench serve) on each render and
#                                                      the engine's /metrics (tests/device/bench_pd_vs_aggregated.py)
#                                                      (--fault: kill -9 that stage under load and watch;
#                                                      --restart-after-fault: then restart as Restart=always would)
#   tests/device/pd_serving.sh span [--kill main|engine|group] NAME=RENDER
#                                                      a PD pipeline spanning two inventory hosts on this one GPU
#                                                      (head + headless), its headless stage killed under load
#                                                      and restarted in the deploy's order (tests/device/span_serving.py)
#   tests/device/pd_serving.sh contract [--budget S] NAME=RENDER...
#                                                      the client's sampling fields against each pipeline's answers, and
#                                                      the greedy answers of the pipelines compared (tests/device/contract.py)
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=/srv/stage
command=${1:-}
shift || true
case "$command" in
  stage)
    mkdir -p "$stage/in"
    for file in "$@"; do cp "$file" "$stage/in/"; done
    ls -l "$stage/in"
    ;;
  run|imports|bench|span|contract)
    if [ ! -d "$stage/site" ]; then
      # The parts of the manifest in $DEVICE_PAYLOAD (0.26.0's by default; tests/device/payload-0.30.0.json).
      mapfile -t parts < <(python3 -c 'import json, sys; [print(p["name"]) for p in json.load(open(sys.argv[1]))["parts"]]' \
        "${DEVICE_PAYLOAD:-tests/device/payload.json}")
      tests/device/unpack_payload.sh "$stage" "${parts[@]/#/$stage/in/}"
    fi
    if [ ! -d "$stage/model" ]; then
      tar -C "$stage" -xzf "$stage/in/extras.tar.gz"  # model/ and render/<inventory>/
    fi
    nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
    echo "$(. /etc/os-release; echo "$PRETTY_NAME"), $(python3 -V), $(ldd --version | head -1), $(uname -r)"
    find /dev -maxdepth 1 -name 'nvidia*' -exec ls -l {} + 2>/dev/null | head -4
    if [ "$command" = bench ]; then
      PYTHONUNBUFFERED=1 exec python3 tests/device/bench_pd_vs_aggregated.py --out "${OUT:-/tmp/out}" "$@"
    fi
    if [ "$command" = span ]; then
      PYTHONUNBUFFERED=1 exec python3 tests/device/span_serving.py --out "${OUT:-/tmp/out}" "$@"
    fi
    if [ "$command" = contract ]; then
      PYTHONUNBUFFERED=1 exec python3 tests/device/contract.py --out "${OUT:-/tmp/out}" "$@"
    fi
    if [ "$command" = imports ]; then set -- --imports-only "$@"; fi
    PYTHONUNBUFFERED=1 python3 tests/device/pd_serving.py --out "${OUT:-/tmp/out}" "$@"
    ;;
  *)
    sed -n '2,26p' "$0" >&2
    exit 2
    ;;
esac
