#!/usr/bin/env bash
# Real-GPU evidence for busy detection: hold ~10 GiB on GPU 1 from a foreign process, then run
# discovery and a plan. Expect GPU 1 reported busy (process and memory) and left out of the plan.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p "$OUT"
python3 -c "import torch, time; x = torch.empty(10 * 2**30, dtype=torch.uint8, device='cuda:1'); print('holding', flush=True); time.sleep(90)" > "$OUT/holder.log" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q holding "$OUT/holder.log" && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_memory --format=csv,noheader,nounits > "$OUT/compute-apps.csv"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits > "$OUT/memory-used.csv"
export PYTHONPATH=/tmp/site ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collection ANSIBLE_NOCOLOR=1
ap() { python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0]="ansible-playbook"; main()' "$@"; }
ap tests/device/facts.yml -i tests/device/inventory.yml -e evidence_dir="$OUT" > "$OUT/facts.log" 2>&1; echo "facts rc=$?"
ap playbooks/render.yml -i tests/device/inventory.yml -e @"$OUT/gpu_facts_vars.json" -e vllm_omni_render_dir=/tmp/render \
  > "$OUT/render.log" 2>&1; echo "render rc=$?"
kill $holder; wait $holder 2>/dev/null
cat "$OUT/compute-apps.csv" "$OUT/memory-used.csv"; grep -B2 -A12 "problem" "$OUT/render.log" | head -20
tar -C "$OUT" -czf /tmp/busy.tar.gz . && rm -rf "${OUT:?}"/* && mv /tmp/busy.tar.gz "$OUT/"
