#!/usr/bin/env bash
# Real-GPU evidence (issue 7), run on the device machine through the `device` tool:
#   GPU discovery, preflight and a plan from the discovered facts, with ansible-core's local
#   connection. Everything it learns lands in $OUT (committed as tests/fixtures/device-h200x2/).
# Needs: ansible-core and its dependencies as wheels in .whl/ (carried), root, nvidia-smi.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
if [ -z "${EVIDENCE_USE_INSTALLED_ANSIBLE:-}" ]; then  # set when rehearsing with the lab's stand-in
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collection
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=default
ap() { python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0]="ansible-playbook"; main()' "$@"; }
mkdir -p "$OUT/raw" "$OUT/reports"
{ uname -a; python3 --version; python3 -c 'import ansible; print("ansible-core", ansible.__version__)'; } > "$OUT/raw/versions.txt"
nvidia-smi > "$OUT/raw/nvidia-smi.txt"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,driver_version,compute_cap,persistence_mode,mig.mode.current \
  --format=csv,noheader,nounits > "$OUT/raw/query-gpu.csv"
nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_memory --format=csv,noheader,nounits > "$OUT/raw/compute-apps.csv"
nvidia-smi topo -m > "$OUT/raw/topo-m.txt"
inv=tests/device/inventory.yml
echo "== discovery"; ap tests/device/facts.yml -i $inv -e evidence_dir="$OUT" > "$OUT/facts.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/facts.log"
echo "== preflight"; ap playbooks/preflight.yml -i $inv -e preflight_report_dir="$OUT/reports" > "$OUT/preflight.log" 2>&1
echo "rc=$?" | tee -a "$OUT/preflight.log"; grep -A40 "Preflight | summary" "$OUT/preflight.log" | head -40
echo "== plan + render from the discovered facts"
ap playbooks/render.yml -i $inv -e @"$OUT/gpu_facts_vars.json" -e vllm_omni_render_dir="$OUT/render" > "$OUT/render.log" 2>&1
echo "rc=$?"; grep -A30 "what you set" "$OUT/render.log" | head -30
# The device tool brings back a handful of files: pack everything into one.
tar -C "$OUT" -czf /tmp/evidence.tar.gz . && rm -rf "${OUT:?}"/* && mv /tmp/evidence.tar.gz "$OUT/"
