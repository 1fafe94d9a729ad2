#!/usr/bin/env bash
# The device side of the real-GPU PD run (issue 11; docs/gpu-evidence.md), called through the device
# tool's `run` from the repository root, after tests/device/prepare.sh built .device/ here:
#   tests/device/pd_serving.sh stage FILE...          keep carried files in /root/stage/in; one 56 MiB
#                                                      part per call (the tool carries 64 MiB), calls back
#                                                      to back (the machine is given back after 30 s idle)
#   tests/device/pd_serving.sh imports NAME=RENDER         unpack, set up that render's venv, import the engine
#   tests/device/pd_serving.sh run NAME=RENDER[:stock]...
#                                                      unpack once, then serve and measure each scenario
#                                                      (tests/device/pd_serving.py); results land in $OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=/root/stage
command=${1:-}
shift || true
case "$command" in
  stage)
    mkdir -p "$stage/in"
    for file in "$@"; do cp "$file" "$stage/in/"; done
    ls -l "$stage/in"
    ;;
  run|imports)
    if [ ! -d "$stage/site" ]; then
      tests/device/unpack_payload.sh "$stage" "$stage"/in/engine.tar.xz.part*
    fi
    if [ ! -d "$stage/model" ]; then
      tar -C "$stage" -xzf "$stage/in/extras.tar.gz"  # model/ and render/<inventory>/
    fi
    nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
    if [ "$command" = imports ]; then set -- --imports-only "$@"; fi
    PYTHONUNBUFFERED=1 python3 tests/device/pd_serving.py --out "${OUT:-/tmp/out}" "$@"
    ;;
  *)
    sed -n '2,10p' "$0" >&2
    exit 2
    ;;
esac
