#!/usr/bin/env bash
# The controller side of the real-GPU PD run (docs/gpu-evidence.md): everything the device machine
# needs, built here (PyPI and Debian mirrors reachable) into .device/ (git-ignored):
#   .device/engine.tar.xz.partN        the packages of data/locks/ubuntu2404/vllm-omni-0.26.0-pd.txt that the
#                                      device image lacks, at the lock's versions and hashes (build_payload.py)
#   .device/extras.tar.gz              the tiny random Qwen3-Omni (tiny_model.py) and the collection's
#                                      render of every tests/device/inventories/*.yml (render.yml)
# Run through `make device-payload` (it provides the tool venv and the 0.26.0 engine venv, whose
# transformers writes the model's config). Re-running reuses downloads.
set -euo pipefail
cd "$(dirname "$0")/../.."
engine_python=${ENGINE_PYTHON:?set ENGINE_PYTHON to a vLLM-Omni 0.26.0 venv python (make device-payload does)}
python3 tests/device/build_payload.py
rm -rf .device/extras && mkdir -p .device/extras/render
"$engine_python" tests/device/tiny_model.py .device/extras/model
for inventory in tests/device/inventories/*.yml; do
  name=$(basename "$inventory" .yml)
  ansible-playbook playbooks/render.yml -i "$inventory" -e vllm_omni_render_dir="$PWD/.device/extras/render/$name" \
    > ".device/render-$name.log" || { cat ".device/render-$name.log"; exit 1; }
done
# The render must install the lock the payload was built from (the device is the ubuntu2404 platform).
python3 tests/device/build_payload.py --check-renders .device/extras/render
tar -C .device/extras -czf .device/extras.tar.gz model render
ls -l .device/engine.tar.xz.part* .device/extras.tar.gz
parts=(.device/engine.tar.xz.part*)
echo "Now, through the device tool, back to back (the machine is given back after 30 s idle):"
for ((i = 0; i < ${#parts[@]} - 1; i++)); do
  echo "  run  tests/device/pd_serving.sh stage ${parts[i]}    carry [${parts[i]}]"
done
echo "  run  tests/device/pd_serving.sh stage ${parts[-1]} .device/extras.tar.gz    carry [both]"
echo "  run  tests/device/pd_serving.sh run --compile-bytecode pd-text=/srv/stage/render/pd-text pd-text-sandboxed=/srv/stage/render/pd-text:sandbox"
