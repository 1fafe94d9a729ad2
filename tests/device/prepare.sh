#!/usr/bin/env bash
# The controller side of the real-GPU PD run (record/gpu-evidence.md): everything the device machine
# needs, built here (PyPI and Debian mirrors reachable) into .device/ (git-ignored):
#   .device/engine.tar.xz.partN        the packages of data/locks/ubuntu2404/vllm-omni-0.26.0-pd.txt that the
#                                      device image lacks, at the lock's versions and hashes (build_payload.py)
#   .device/extras.tar.gz              the tiny random Qwen3-Omni (tiny_model.py) and the collection's
#                                      render of every tests/device/inventories/*.yml (render.yml)
# Run through `make device-payload` (it provides the tool venv and the 0.26.0 engine venv, whose
# transformers writes the model's config). Re-running reuses downloads. Then it prints the device calls.
#   tests/device/prepare.sh --calls    only print the calls (and their estimated seconds, once the renders
#                                      exist in .device/extras/render or $DEVICE_RENDER_ROOT)
# DEVICE_ENGINE=0.30.0 builds vLLM-Omni 0.30.0's payload instead (.device/payload-0.30.0.partN: the xz and the torch
# 2.13 wheels carried whole, manifest tests/device/payload-0.30.0.json) with the renders of
# tests/device/inventories/0.30.0/*.yml, and prints that run's calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=${DEVICE_ENGINE:-0.26.0}
if [ "$engine" = 0.26.0 ]; then
  manifest=tests/device/payload.json inventories=tests/device/inventories
else
  manifest=tests/device/payload-$engine.json inventories=tests/device/inventories/$engine
fi

# The spec both renders of call A run (the bench role's grid). OSL 32: the decode stage's max_tokens in the
# device inventories; vLLM-Omni 0.26 stops PD there whatever the harness asks, and aggregated would go on.
spec='{"input_lens": [512], "output_lens": [32], "concurrency": [1, 4, 8], "prompts_min": 8, "prompts_per_concurrency": 2}'
render=/srv/stage/render
bench_a=(--compile-bytecode --ready-timeout 240 --spec "$spec" "pd-text=$render/pd-text" "aggregated-text=$render/aggregated-text")
span_b=(--ready-timeout 360 "span=$render/pd-span-text")
fault_c=(--no-grid --ready-timeout 240 --fault 1 --fault-window 60 --restart-after-fault "pd-text=$render/pd-text")
restart_d=(--ready-timeout 300 --requests 4 --restart natural "span=$render/pd-span-text")
restart_e=(--ready-timeout 300 --requests 4 --restart bounded "span=$render/pd-span-text")
heal_f=(--ready-timeout 300 --requests 4 --self-heal 5 "span=$render/pd-span-text")

shown() {  # the arguments as they are typed: the spec in single quotes
  local arg out=()
  for arg in "$@"; do
    if [[ $arg == *' '* ]]; then out+=("'$arg'"); else out+=("$arg"); fi
  done
  echo "${out[*]}"
}

estimate() {  # the script's own plan of a call, as "about N s"; nothing starts
  DEVICE_RENDER_ROOT=${DEVICE_RENDER_ROOT:-.device/extras/render} python3 "$@" 2>/dev/null \
    | python3 -c 'import json, sys; d = json.load(sys.stdin); print("about %d s" % d.get("if the head lives", d)["total_s"])' \
    2>/dev/null || echo "estimate once the renders exist"
}

calls() {
  local parts last i
  mapfile -t parts < <(python3 -c 'import json, sys; [print(".device/" + p["name"]) for p in json.load(open(sys.argv[1]))["parts"]]' "$manifest")
  last=${parts[-1]}
  echo "Now, through the device tool, back to back (the machine is given back 30 s after a call ends):"
  for ((i = 0; i < ${#parts[@]} - 1; i++)); do
    echo "  $((i + 1)). run  tests/device/pd_serving.sh stage ${parts[i]}    carry [${parts[i]}]  timeout_s 120"
  done
  echo "  ${#parts[@]}. run  tests/device/pd_serving.sh stage $last .device/extras.tar.gz &&" \
    "tests/device/pd_serving.sh imports pd-text=$render/pd-text    carry [$last, .device/extras.tar.gz]  timeout_s 300"
  echo "     (unpack, versions, imports: about 40 s)"
  echo "Then, each command keeping itself inside --budget 570 s (what does not fit is skipped and said so in its JSON):"
  echo "  A. run  tests/device/pd_serving.sh bench $(shown "${bench_a[@]}")    timeout_s 600"
  echo "     ($(estimate tests/device/bench_pd_vs_aggregated.py --estimate "${bench_a[@]}"): both grids; bench.json, pd-text/ and aggregated-text/report.json)"
  echo "  B. run  tests/device/pd_serving.sh span $(shown "${span_b[@]}")    timeout_s 600"
  echo "     ($(estimate tests/device/span_serving.py --estimate "${span_b[@]}") if the head lives on; if it exits too, its restart"
  echo "     may not fit and results.json says how far it got)"
  echo "  C. run  tests/device/pd_serving.sh bench $(shown "${fault_c[@]}")    timeout_s 600"
  echo "     ($(estimate tests/device/bench_pd_vs_aggregated.py --estimate "${fault_c[@]}"): decode killed, the restart timed; bench.json)"
  echo "  D. run  tests/device/pd_serving.sh span $(shown "${restart_d[@]}")    timeout_s 600"
  echo "     ($(estimate tests/device/span_serving.py --estimate "${restart_d[@]}"): the span restarted in the deploy's order,"
  echo "     the head left to exit by itself: when it stops serving HTTP, when it exits)"
  echo "  E. run  tests/device/pd_serving.sh span $(shown "${restart_e[@]}")    timeout_s 600"
  echo "     ($(estimate tests/device/span_serving.py --estimate "${restart_e[@]}"): the same, the head's leftovers killed once"
  echo "     its HTTP server is done; then it serves again, judged)"
  echo "  F. run  tests/device/pd_serving.sh span $(shown "${heal_f[@]}")    timeout_s 600"
  echo "     (run 9's kill of the headless stage with the hosts' self-heal agents probing every 5 s: the head restarted"
  echo "     by its agent, the stage by its own or by Restart=always; serving again, judged, with no person)"
  echo "In that order of value: A is issue 25's PD against aggregated (one spec, both reports, compare); B has never"
  echo "run on a GPU (a head and a headless process, the headless killed, re-registration); C repeats run 7's kill for"
  echo "decode (stage 1) and times the restart. A with C's fault would not fit one call: the grids come first."
  echo "Back here: results.json/bench.json, NAME/report.json, bench-files.tar.gz and logs.tar.gz in the tool's files_at;"
  echo "  tar -C DIR -xzf FILES_AT/bench-files.tar.gz; python roles/bench/files/vllm_omni_bench.py report|compare (plots);"
  echo "  python3 tests/device/excerpt.py FILES_AT... tests/fixtures/NAME"
}

calls_030() {  # vLLM-Omni 0.30.0 (issue 41): each pipeline started once for the contract and the bench grid
  local parts i
  mapfile -t parts < <(python3 -c 'import json, sys; [print(".device/" + p["name"]) for p in json.load(open(sys.argv[1]))["parts"]]' "$manifest")
  echo "Now, through the device tool, back to back (the machine is given back 30 s after a call ends):"
  for ((i = 0; i < ${#parts[@]}; i++)); do
    echo "  $((i + 1)). run  tests/device/pd_serving.sh stage ${parts[i]}    carry [${parts[i]}]  timeout_s 120"
  done
  echo "  $((${#parts[@]} + 1)). run  tests/device/pd_serving.sh stage .device/extras.tar.gz && DEVICE_PAYLOAD=$manifest" \
    "tests/device/pd_serving.sh imports pd-text=$render/pd-text    carry [.device/extras.tar.gz]  timeout_s 300"
  echo "Then (DEVICE_PAYLOAD=$manifest before each):"
  echo "  A. tests/device/pd_serving.sh contract --bench-spec '$spec' pd-text=$render/pd-text    timeout_s 600"
  echo "  W. tests/device/pd_serving.sh run --keep-compile-cache --ready-timeout 400 pd-text=$render/pd-text    timeout_s 600"
  echo "     (issue 43: the same PD started again on the compile cache A left, as a host's unit keeps it; A's start is"
  echo "     the cold one: run 17's was 284 s; an aggregated thinker's JIT kernel warmup alone took 109 s there)"
  echo "  B. tests/device/pd_serving.sh contract --budget 590 --ready-timeout 480 --keep-compile-cache --bench-spec '$spec' aggregated-text=$render/aggregated-text    timeout_s 600"
  echo "     (0.30's aggregated pipeline compiles Triton kernels for three stages in turn: not ready within 320 s in run 17,"
  echo "     its thinker alone took 190 s; --keep-compile-cache starts it on the Triton cache A left (the same engine"
  echo "     home), so say so when its start time is quoted; the grid is skipped, and said so, if the start leaves too little)"
  echo "  C. tests/device/pd_serving.sh contract pd-text-nixl=$render/pd-text-nixl    timeout_s 600"
  echo "A and B are one spec's grids: PD against aggregated (compare their report.json files back here); A and W are"
  echo "the cold and the warm start of one render."
}

if [ "${1:-}" = --calls ]; then
  if [ "$engine" = 0.26.0 ]; then calls; else calls_030; fi
  exit 0
fi

engine_python=${ENGINE_PYTHON:?set ENGINE_PYTHON to a vLLM-Omni 0.26.0 venv python (make device-payload does)}
python3 tests/device/build_payload.py --engine "$engine"
rm -rf .device/extras && mkdir -p .device/extras/render
"$engine_python" tests/device/tiny_model.py .device/extras/model
for inventory in "$inventories"/*.yml; do
  name=$(basename "$inventory" .yml)
  ansible-playbook playbooks/render.yml -i "$inventory" -e vllm_omni_render_dir="$PWD/.device/extras/render/$name" \
    > ".device/render-$name.log" || { cat ".device/render-$name.log"; exit 1; }
done
# The render must install the lock the payload was built from (the device is the ubuntu2404 platform).
python3 tests/device/build_payload.py --check-renders .device/extras/render
tar -C .device/extras -czf .device/extras.tar.gz model render
ls -l .device/extras.tar.gz
if [ "$engine" = 0.26.0 ]; then calls; else calls_030; fi
