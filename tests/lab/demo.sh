#!/usr/bin/env bash
# make demo: the local lab (3 systemd-nspawn machines), the simulator-backed deploy on it, one
# completion through the router, and a last machine-readable line:
#   demo: router=https://ADDRESS:PORT model=MODEL_NAME key_file=PATH ca_file=PATH
# The router's front door speaks TLS with a certificate from the collection's own CA (ca_file).
# SIMULATOR: the lab has no GPU, so xpyd-sim stands in for vLLM-Omni behind the same units,
# ports, environment files and router. Stage configs are still rendered (see make conformance).
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${VLLM_OMNI_CACHE:-$HOME/.cache/vllm-omni-serve}
key_file=$cache/lab/demo-api-key
secrets=$cache/lab/demo-secrets.yml
start=$(date +%s)

python tests/lab/lab.py up --hosts 3 --gpu-profile h200x8-nvswitch
if [ ! -s "$key_file" ]; then
  (umask 077; python -c 'import secrets; print(secrets.token_urlsafe(32))' > "$key_file")
fi
(umask 077; printf 'vllm_omni_api_key: %s\n' "$(cat "$key_file")" > "$secrets")

ansible-playbook playbooks/deploy.yml -i inventories/lab/hosts.yml -i tests/lab/demo/hosts.yml -e @"$secrets"

read -r router_url model ca_file < <(python tests/lab/demo_info.py)
echo
echo "Router: $router_url  (SIMULATOR backend: xpyd-sim stands in for vLLM-Omni in the lab)"
echo "TLS: the front door's certificate comes from the collection's CA: $ca_file"
echo "Try it:"
echo "  curl -s --cacert $ca_file $router_url/v1/chat/completions -H \"Authorization: Bearer \$(cat $key_file)\" \\"
echo "    -H 'Content-Type: application/json' -d '{\"model\": \"$model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'"
answer=$(curl -s --cacert "$ca_file" --max-time 60 "$router_url/v1/chat/completions" -H "Authorization: Bearer $(cat "$key_file")" \
  -H 'Content-Type: application/json' \
  -d "{\"model\": \"$model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 24}")
echo "First completion: $(python -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' <<< "$answer")"
echo "(demo took $(( $(date +%s) - start )) s)"
echo "demo: router=$router_url model=$model key_file=$key_file ca_file=$ca_file"
