#!/usr/bin/env bash
# The controller side of the real-GPU PD run (docs/gpu-evidence.md): everything the device machine
# needs, built here (PyPI and Debian mirrors reachable) into .device/ (git-ignored):
#   .device/engine.tar.xz.part{0,1,2}  vLLM 0.26.0 + vLLM-Omni 0.26.0 + Mooncake, staged (build_payload.py)
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
tar -C .device/extras -czf .device/extras.tar.gz model render
ls -l .device/engine.tar.xz.part* .device/extras.tar.gz
cat <<'NEXT'
Now, through the device tool, back to back (the machine is given back after 30 s idle):
  run  tests/device/pd_serving.sh stage .device/engine.tar.xz.part0                       carry [.device/engine.tar.xz.part0]
  run  tests/device/pd_serving.sh stage .device/engine.tar.xz.part1                       carry [.device/engine.tar.xz.part1]
  run  tests/device/pd_serving.sh stage .device/engine.tar.xz.part2 .device/extras.tar.gz carry [both]
  run  tests/device/pd_serving.sh run pd-text=/root/stage/render/pd-text pd-text-stock=/root/stage/render/pd-text:stock
  run  tests/device/pd_serving.sh run aggregated-text=/root/stage/render/aggregated-text pd-audio=/root/stage/render/pd-audio
NEXT
