# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Every inventory setting the collection reads: name, scope, type, default, meaning.

This table is the single source for the settings: the planner validates and defaults from it,
``docs/variables.md`` is generated from it (``make docs``; a unit test fails when they drift),
and unknown or misspelled ``vllm_omni_*`` names are found by comparing against it.

Scopes:
* ``host``: may differ per host (host_vars, or per-host lines in the inventory).
* ``deployment``: one value for the whole deployment (group_vars). Different values on
  different hosts are refused, because one deployment runs one engine version, model, layout.
* ``playbook``: read by one playbook (usually passed with ``-e``); not part of the plan.
* ``secret``: read by a role while writing a host's secret files; never part of the plan.
"""

from __future__ import annotations

from ..host import _platforms
from ._checkers import (
    Setting,
    check_bool,
    check_choice,
    check_cidr_list,
    check_env,
    check_float,
    check_gpu_list,
    check_int,
    check_ipv4,
    check_mapping,
    check_max_unavailable,
    check_pipelines_per_host,
    check_port_range,
    check_str,
    check_string_list,
    check_tp,
)
from ._path_checks import check_abs_path, check_controller_dir, check_controller_file, check_model

HOST = "host"
DEPLOYMENT = "deployment"
PLAYBOOK = "playbook"  # read by a playbook (usually from -e), not part of the plan
SECRET = "secret"  # noqa: S105 - a scope name: read by the roles on the hosts only; never in the plan

# Names the collection itself sets as facts during a run; they appear in hostvars on a second
# pass and are not user settings.
COMPUTED_FACTS = frozenset({"vllm_omni_plan", "vllm_omni_gpu_facts", "vllm_omni_os_facts"})

# Removed or renamed settings: name -> message. Empty until a release renames something;
# the check runs regardless so a rename never silently drops a user's value.
REMOVED_SETTINGS: dict[str, str] = {}


# --- the table --------------------------------------------------------------------------------

NAME_PATTERN = r"[a-z][a-z0-9-]{0,23}"


SETTINGS: tuple[Setting, ...] = (
    # Per host.
    Setting("vllm_omni_gpus", HOST, None, "list of int",
            "Physical GPU indices (nvidia-smi numbering) this deployment may use on the host. Optional once GPU "
            "discovery ran (deploy.yml): then every free discovered GPU. Pipelines are placed topology-aware when "
            "discovery read `nvidia-smi topo -m`, in ascending order otherwise; left-over GPUs are reported.",
            check_gpu_list, default_doc="discovered GPUs"),
    Setting("vllm_omni_ip", HOST, None, "IPv4 address",
            "Address the other hosts and the router reach this host on. Engines bind to it and it "
            "becomes kv_ip / VLLM_HOST_IP. Must not be loopback unless engines and router share one host.",
            check_ipv4, default_doc="`ansible_host`"),
    Setting("vllm_omni_pipelines_per_host", HOST, "auto", "`auto` or int",
            "How many whole pipelines to run on the host; `auto` = as many as its GPUs fit, and GPUs left over "
            "may serve pipelines that span hosts (vllm_omni_span_hosts). A number: exactly that many whole "
            "pipelines, and no GPU of the host for spanning pipelines.",
            check_pipelines_per_host),
    Setting("vllm_omni_span_group", HOST, "all", "string",
            "Hosts pool their spare GPUs into spanning pipelines only with hosts of the same group (a rack, one "
            "RDMA or NVLink domain). Every host is in group `all` unless set.",
            lambda v, n: check_str(v, n, NAME_PATTERN, "a lower-case name (a-z, 0-9, -; up to 24 characters)",
                                   "rack-a")),
    Setting("vllm_omni_host_platform", HOST, "auto", "`auto` or a platform",
            "The host platform (data/platforms.yml, docs/platforms.md) whose locks the host's venvs install from and "
            "whose Python builds them: `auto` = the one matching the OS discovery reads (render assumes debian12 "
            "until then). Set it for a close derivative of a supported OS with the same Python and glibc; preflight "
            "checks the host has them.",
            lambda v, n: check_choice(v, n, ("auto", *_platforms.platform_ids()))),
    # One value for the deployment.
    Setting("vllm_omni_version", DEPLOYMENT, "0.26.0", "string",
            "vLLM-Omni version (vLLM is pinned to the same version). One of the support table's "
            "versions (README, Support matrix).",
            lambda v, n: check_str(v, n, r"\d+\.\d+\.\d+", "a version like 0.26.0", "0.26.0")),
    Setting("vllm_omni_model", DEPLOYMENT, "Qwen/Qwen3-Omni-30B-A3B-Instruct", "string",
            "Hugging Face repository id (`org/name`) or absolute path of the model on the hosts.",
            check_model),
    Setting("vllm_omni_served_model_name", DEPLOYMENT, None, "string",
            "Model name clients send in requests (`--served-model-name`).",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}", "a model name", "qwen3-omni"),
            default_doc="`vllm_omni_model`"),
    Setting("vllm_omni_layout", DEPLOYMENT, "pd", "`pd` or `aggregated`",
            "`pd`: prefill and decode thinker stages on separate GPUs with Mooncake KV transfer "
            "(4 stages). `aggregated`: the engine's own 3-stage layout.",
            lambda v, n: check_choice(v, n, ("pd", "aggregated"))),
    Setting("vllm_omni_audio_output", DEPLOYMENT, True, "bool",
            "`true`: the full Qwen3-Omni pipeline, text and speech out (talker + code2wav stages on one further GPU). "
            "`false`: text out only, thinker stages alone (pd: prefill + decode; aggregated: one thinker), one GPU "
            "less per pipeline. Needs a stage_args version (the stages: schema fixes the pipeline in Python).",
            check_bool),
    Setting("vllm_omni_share_gpus", DEPLOYMENT, False, "bool",
            "`true`: every stage of a pipeline runs on the pipeline's one tensor-parallel GPU group (a single-GPU "
            "host, a development box, a small model). The planner splits gpu_memory_utilization between the "
            "stages (docs/variables.md#shared-gpus) unless vllm_omni_stage_engine_args sets it; the shares of the "
            "stages on one GPU must add up to at most 0.95, and each share must hold that stage's weights.",
            check_bool),
    Setting("vllm_omni_tensor_parallel_size", DEPLOYMENT, 1, "int (1, 2, 4, 8)",
            "Tensor-parallel size of the thinker stages (prefill and decode alike: the engine refuses "
            "unequal sizes). Talker and code2wav share one further GPU.",
            check_tp),
    Setting("vllm_omni_prefill_replicas", DEPLOYMENT, 1, "int",
            "Prefill engines per pd pipeline (xPyD: with vllm_omni_decode_replicas the prefill:decode ratio). Above "
            "1, the pipeline's stages run as processes of their own (a head and headless stages; "
            "docs/multi-host-pd.md), on one host when they fit, across hosts otherwise. Text-out pipelines only "
            "(vllm_omni_audio_output: false).",
            lambda v, n: check_int(v, n, 1, 64)),
    Setting("vllm_omni_decode_replicas", DEPLOYMENT, 1, "int",
            "Decode engines per pd pipeline; see vllm_omni_prefill_replicas.",
            lambda v, n: check_int(v, n, 1, 64)),
    Setting("vllm_omni_span_hosts", DEPLOYMENT, True, "bool",
            "Let a text-out pd pipeline span hosts: spare GPUs of hosts in one vllm_omni_span_group (a host too small "
            "for a whole pipeline, GPUs left over after whole pipelines) make pipelines of their own. A whole "
            "pipeline on one host is always preferred. false: every pipeline on one host.",
            check_bool),
    Setting("vllm_omni_stage_master_port_base", DEPLOYMENT, 8400, "port",
            "Port of the OmniMasterServer where a distributed pipeline's headless stages register "
            "(`--omni-master-port`), on its head host: base + the head's process index on that host.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_stage_zmq_port_range", DEPLOYMENT, [20000, 23999], "[first, last]",
            "Ports a distributed pipeline's processes open for each other (the master's handshake and data "
            "sockets, the coordinator): each process gets its own slice (VLLM_PORT = its first port). Keep it "
            "below the kernel's ephemeral range.",
            check_port_range),
    Setting("vllm_omni_stage_zmq_ports_per_process", DEPLOYMENT, 64, "int",
            "Size of each distributed process's slice of vllm_omni_stage_zmq_port_range.",
            lambda v, n: check_int(v, n, 16, 4096)),
    Setting("vllm_omni_replica_lb_policy", DEPLOYMENT, "least-queue-length", "string",
            "How a distributed pipeline's head spreads requests over a stage's replicas (`--omni-lb-policy`): "
            "random, round-robin or least-queue-length.",
            lambda v, n: check_choice(v, n, ("random", "round-robin", "least-queue-length"))),
    Setting("vllm_omni_api_port_base", DEPLOYMENT, 8091, "port",
            "API port of a host's first pipeline; pipeline i listens on base + i.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_kv_connector", DEPLOYMENT, "mooncake", "`mooncake` or `nixl`",
            "PD: how prefill's KV reaches decode. `mooncake`: Mooncake's transfer engine (TCP or RDMA, "
            "vllm_omni_mooncake_*). `nixl`: NVIDIA's NIXL over UCX, which picks RDMA where the host has "
            "verbs devices and TCP otherwise (vllm_omni_nixl_*). Both through the collection's subclass of "
            "vLLM's connector; which versions run which: the README's support matrix.",
            lambda v, n: check_choice(v, n, ("mooncake", "nixl"))),
    Setting("vllm_omni_bootstrap_port_base", DEPLOYMENT, 8998, "port",
            "Mooncake bootstrap port (VLLM_MOONCAKE_BOOTSTRAP_PORT) of a host's first pipeline; "
            "pipeline i uses base + i.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_mooncake_rpc_port_range", DEPLOYMENT, [16000, 16999], "[first, last]",
            "Ports Mooncake's transfer engine may listen on; pipeline i of a host gets the i-th slice "
            "(MC_MIN_RPC_PORT..MC_MAX_RPC_PORT). Open it between hosts.",
            check_port_range),
    Setting("vllm_omni_mooncake_rpc_ports_per_pipeline", DEPLOYMENT, 64, "int",
            "Size of each pipeline's slice of the Mooncake range. Fixed, so adding or removing a pipeline never "
            "moves (and restarts) the others; needs at least 8 per thinker GPU (2 listeners per prefill/decode "
            "worker, doubled).",
            lambda v, n: check_int(v, n, 8, 8192)),
    Setting("vllm_omni_mooncake_protocol", DEPLOYMENT, "tcp", "`tcp` or `rdma`",
            "Mooncake transport for the prefill-to-decode KV transfer.",
            lambda v, n: check_choice(v, n, ("tcp", "rdma"))),
    Setting("vllm_omni_mooncake_rdma_devices", DEPLOYMENT, [], "list of string",
            "RDMA devices Mooncake may use (e.g. `mlx5_0`); empty = auto-discover. Only with protocol rdma.",
            lambda v, n: check_string_list(v, n, r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", "RDMA device names")),
    Setting("vllm_omni_kv_load_failure_policy", DEPLOYMENT, "fail", "`fail` or `recompute`",
            "PD: what a decode engine does when loading a request's KV from prefill fails (kv_transfer_config."
            "kv_load_failure_policy). `fail` ends that request with an error (the client sees it, "
            "VllmOmniPDHandoffFailures counts it); `recompute` prefills it again on decode, silently, at "
            "decode's cost.",
            lambda v, n: check_choice(v, n, ("fail", "recompute"))),
    Setting("vllm_omni_mooncake_abort_timeout", DEPLOYMENT, 120, "seconds",
            "PD: how long a prefill engine keeps a finished request's KV blocks for decode to pull before it "
            "frees them (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT; vLLM's default is 480). Decode gives up on a "
            "transfer 60 s after it. Long enough for a busy decode to schedule the request, short enough "
            "that KV a dead or vanished decode never pulls is back within minutes.",
            lambda v, n: check_int(v, n, 10, 3600)),
    Setting("vllm_omni_nixl_side_channel_port_base", DEPLOYMENT, 5600, "port",
            "NIXL: the handshake port of a host's first KV engine; process i's prefill engine listens on "
            "base + 2i, its decode engine on base + 2i + 1 (each stage's own, in its stage config). Open "
            "between inventory hosts.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_nixl_ucx_port_range", DEPLOYMENT, [17000, 17999], "[first, last]",
            "NIXL: ports UCX's TCP transport may listen on; process i of a host gets the i-th slice "
            "(UCX_TCP_PORT_RANGE). Open between inventory hosts.",
            check_port_range),
    Setting("vllm_omni_nixl_ucx_ports_per_pipeline", DEPLOYMENT, 64, "int",
            "NIXL: size of each process's slice of the UCX range. Fixed, so adding or removing a pipeline "
            "never moves (and restarts) the others; needs at least 8 per thinker GPU (a UCX agent per "
            "prefill/decode worker, listeners per network interface).",
            lambda v, n: check_int(v, n, 8, 8192)),
    Setting("vllm_omni_stage_engine_args", DEPLOYMENT, {}, "mapping",
            "Per-stage engine argument overrides: `{stage: {arg: value}}`. Stages: prefill, decode, "
            "talker, code2wav (pd) or thinker, talker, code2wav (aggregated); `thinker` in pd sets both "
            "thinker stages. Allowed arguments: docs/variables.md#stage-overrides.",
            check_mapping),
    Setting("vllm_omni_stage_sampling_params", DEPLOYMENT, {}, "mapping",
            "Per-stage default sampling parameter overrides, same stage names: `{stage: {param: value}}`.",
            check_mapping),
    Setting("vllm_omni_pipeline_prefix", DEPLOYMENT, "omni", "string",
            "Pipeline names are prefix + index (omni0, omni1, ...); they name units, directories, engine ids.",
            lambda v, n: check_str(v, n, NAME_PATTERN, "a lower-case name (a-z, 0-9, -; up to 24 characters)",
                                   "omni")),
    Setting("vllm_omni_install_root", DEPLOYMENT, "/opt/vllm-omni", "absolute path",
            "Root of the per-version engine venvs (`<root>/venvs/<version>`).", check_abs_path),
    Setting("vllm_omni_config_root", DEPLOYMENT, "/etc/vllm-omni", "absolute path",
            "Per-pipeline config directories (`<root>/<pipeline>/`).", check_abs_path),
    Setting("vllm_omni_hf_home", DEPLOYMENT, "/var/lib/vllm-omni/hf", "absolute path",
            "HF_HOME of the engines: where model weights are cached on the hosts.", check_abs_path),
    Setting("vllm_omni_model_staging", DEPLOYMENT, False, "bool",
            "true: engines run with HF_HUB_OFFLINE=1 and load the weights already in HF_HOME (put there by the "
            "operator). vllm_omni_model_source stages them instead, and implies it.",
            check_bool),
    Setting("vllm_omni_model_source", DEPLOYMENT, "none", "`none`, `hub` or `directory`",
            "Where the weights come from. `none`: each engine host downloads them itself on first start. `hub`: the "
            "controller fetches vllm_omni_model at vllm_omni_model_revision once (huggingface_hub; HF_ENDPOINT and "
            "vllm_omni_hf_token honoured) and verifies every file against the hub's hashes. `directory`: the files "
            "in vllm_omni_model_directory on the controller. Either way every engine host gets a hash-checked copy "
            "in HF_HOME's cache layout (fanned out host to host, docs/model-staging.md) and runs offline.",
            lambda v, n: check_choice(v, n, ("none", "hub", "directory"))),
    Setting("vllm_omni_model_revision", DEPLOYMENT, None, "string",
            "The staged revision: the 40-character commit id (hub), or a name for the directory's copy; it names "
            "the snapshot in HF_HOME, and a new one restarts the engines on it.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", "a commit id or a name of letters, "
                                   "digits, . _ -", "5d4d1c4e1e0b8a7b2d3c6f9e8a7b6c5d4e3f2a1b")),
    Setting("vllm_omni_model_directory", DEPLOYMENT, None, "path (controller)",
            "With vllm_omni_model_source `directory`: the controller directory holding the model's files "
            "(config.json, tokenizer, *.safetensors), e.g. a `hf download --local-dir` result. Not a system or "
            "home directory (as a whole), nor in the system's trees; deploy checks on the controller that it holds "
            "a model (config.json and weights) and no link out of it other than into a Hugging Face cache.",
            check_controller_dir),
    Setting("vllm_omni_artifact_port", DEPLOYMENT, 8873, "port",
            "The rsync daemon's port while a deploy fans wheel sets and weights out host to host (open to "
            "inventory peers only, and only during the distribution); the controller serves its one copy on it too.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_artifact_controller_address", DEPLOYMENT, None, "IPv4 address",
            "The address hosts reach the controller on, to pull the first copy of each artifact. Unset: the address "
            "the first host sees the controller's SSH connection come from.",
            check_ipv4, default_doc="the controller's SSH source address"),
    Setting("vllm_omni_init_timeout", DEPLOYMENT, 1800, "seconds",
            "Engine start-up budget (`--init-timeout`, `--stage-init-timeout`); cold model loads exceed 10 min.",
            lambda v, n: check_int(v, n, 60, 86400)),
    Setting("vllm_omni_engine_backend", DEPLOYMENT, "engine", "`engine` or `simulator`",
            "`simulator` runs the xpyd-sim stand-in instead of the engine on CPU-only hosts (tests, rehearsals).",
            lambda v, n: check_choice(v, n, ("engine", "simulator"))),
    Setting("vllm_omni_allow_busy_gpus", DEPLOYMENT, False, "bool",
            "Use GPUs that discovery reports busy (memory in use or compute processes not of this deployment). "
            "Without it, busy GPUs listed in vllm_omni_gpus are refused and undeclared ones are skipped.",
            check_bool),
    Setting("vllm_omni_rolling_max_unavailable", DEPLOYMENT, 1, "int or `N%`",
            "How many serving pipelines a deploy or upgrade restarts at once (drained from the routers first); "
            "a count or a share of the serving pipelines (`\"25%\"`, rounded down). One always keeps serving. "
            "New pipelines and a first deploy start together.",
            check_max_unavailable),
    Setting("vllm_omni_extra_env", DEPLOYMENT, {}, "mapping",
            "Extra environment for every pipeline (e.g. NCCL_* tuning). Planner-owned names are refused.",
            check_env),
    # Router (vllm-router) in front of every pipeline: hosts of group vllm_omni_router (default: the
    # first engine host).
    Setting("vllm_omni_router_port", DEPLOYMENT, 8000, "port", "Router API port (clients send requests here).",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_router_metrics_port", DEPLOYMENT, 29000, "port", "Router Prometheus metrics port.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_router_policy", DEPLOYMENT, "round_robin", "string",
            "Load-balancing policy over the pipelines: round_robin, random, power_of_two, cache_aware, "
            "consistent_hash.",
            lambda v, n: check_choice(v, n, ("round_robin", "random", "power_of_two", "cache_aware",
                                             "consistent_hash"))),
    Setting("vllm_omni_router_max_retries", DEPLOYMENT, 2, "int",
            "Retries of a failed request on another pipeline (the router's retry budget).",
            lambda v, n: check_int(v, n, 0, 10)),
    Setting("vllm_omni_router_request_timeout", DEPLOYMENT, 1800, "seconds",
            "Router timeout for one request (audio generation can take minutes).",
            lambda v, n: check_int(v, n, 10, 86400)),
    Setting("vllm_omni_router_cb_failure_threshold", DEPLOYMENT, 5, "int",
            "Consecutive failures that open a pipeline's circuit breaker (0 disables the breaker).",
            lambda v, n: check_int(v, n, 0, 1000)),
    Setting("vllm_omni_router_cb_timeout", DEPLOYMENT, 30, "seconds",
            "How long an open circuit breaker keeps a pipeline out before probing it again.",
            lambda v, n: check_int(v, n, 1, 3600)),
    Setting("vllm_omni_frontdoor_enabled", DEPLOYMENT, True, "bool",
            "Put a TLS front door (nginx from the distribution) on each router host: it terminates TLS on "
            "vllm_omni_router_port, checks the API key itself and forwards only the OpenAI routes (`/v1/...`) and "
            "`/health`, `/readiness` to vllm-router, which then listens on loopback only "
            "(vllm_omni_router_backend_port): its admin endpoints (`/add_worker`, `/remove_worker`, ...) are "
            "unreachable from other hosts. false: vllm-router itself on vllm_omni_router_port, plain HTTP.",
            check_bool),
    Setting("vllm_omni_router_backend_port", DEPLOYMENT, 18000, "port",
            "vllm-router's port on 127.0.0.1 behind the front door (only with vllm_omni_frontdoor_enabled).",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_tls_cert_file", DEPLOYMENT, None, "path (controller)",
            "The front door's certificate (PEM, leaf first, then its intermediates) on the controller; with "
            "vllm_omni_tls_key_file. It must name each router host's address (vllm_omni_ip) as an IP "
            "subjectAltName for the collection's own checks, which connect by address. Unset: the collection makes "
            "a CA and one certificate per router host on the controller ($VLLM_OMNI_CACHE/tls/; clients trust that "
            "CA's ca.pem, which make demo prints).",
            check_controller_file, default_doc="a certificate from the collection's own CA"),
    Setting("vllm_omni_tls_key_file", DEPLOYMENT, None, "path (controller)",
            "The private key of vllm_omni_tls_cert_file on the controller (PEM). Copied to the router hosts, "
            "0640 root:<the group nginx runs as: www-data on Debian and Ubuntu, nginx on RHEL>.",
            check_controller_file, default_doc="see vllm_omni_tls_cert_file"),
    Setting("vllm_omni_tls_ca_file", DEPLOYMENT, None, "path (controller)",
            "The CA (PEM) that issued vllm_omni_tls_cert_file, if clients do not already trust it (a private CA). "
            "The collection's checks verify the front door against it; unset: against the system's trust store.",
            check_controller_file, default_doc="the system's trust store"),
    Setting("vllm_omni_router_log_level", DEPLOYMENT, "info", "string",
            "Log level of the router process: debug, info, warning or error.",
            lambda v, n: check_choice(v, n, ("debug", "info", "warning", "error"))),
    Setting("vllm_omni_router_health_check_interval", DEPLOYMENT, 5, "seconds",
            "Router's interval between /health checks of each pipeline.",
            lambda v, n: check_int(v, n, 1, 600)),
    Setting("vllm_omni_api_key_required", DEPLOYMENT, True, "bool",
            "Require an API key on every request (enforced by the engines; clients send it through the router). "
            "false only for closed test networks.",
            check_bool),
    # Firewall role (nftables): only the ports of the plan, nothing else on the host.
    Setting("vllm_omni_firewall_enabled", DEPLOYMENT, True, "bool",
            "Install the nftables table `inet vllm_omni`: engine API, bootstrap and Mooncake ports (and the "
            "master's) accept only inventory hosts; the router port also accepts vllm_omni_router_client_cidrs, "
            "the Prometheus port vllm_omni_monitoring_client_cidrs. Other ports are not touched.",
            check_bool),
    Setting("vllm_omni_router_client_cidrs", DEPLOYMENT, [], "list of networks",
            "Client networks allowed to reach the router's API port (besides the inventory hosts). Empty: only "
            "the inventory hosts can. Behind the front door (the default) that port serves the OpenAI routes only; "
            "without it (vllm_omni_frontdoor_enabled: false) vllm-router's unauthenticated admin endpoints share it.",
            check_cidr_list),
    Setting("vllm_omni_monitoring_client_cidrs", DEPLOYMENT, [], "list of networks",
            "Networks allowed to reach Prometheus (and the router's metrics port) besides the inventory hosts.",
            check_cidr_list),
    Setting("vllm_omni_api_key", SECRET, None, "string (vault)",
            "The API key (`Authorization: Bearer ...`): the engines check it, and the front door accepts it from "
            "clients unless vllm_omni_api_keys is set (then it only sends it on to the engines). Keep it in Ansible "
            "Vault; it is written only to the hosts' 0640 engine.env and the front door's 0640 key map, never to the "
            "plan or the render directory.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9._~+/=-]{16,256}", "16-256 characters of A-Z a-z 0-9 . _ ~ + / = -",
                                   "a-long-random-string-from-vault"),
            default_doc="required when vllm_omni_api_key_required"),
    Setting("vllm_omni_api_keys", SECRET, [], "list of strings (vault)",
            "The keys clients may send to the front door, instead of vllm_omni_api_key: a key rotation lists the "
            "old and the new key, then the new one only (docs/security.md, \"Rotating the API key\"). Each is a "
            "bearer token like vllm_omni_api_key, at most 16 of them; the front door sends vllm_omni_api_key on to "
            "the engines whichever a client used, so a rotation reloads nginx and restarts no pipeline. Needs the "
            "front door. Empty: clients send vllm_omni_api_key.",
            default_doc="`[]` (clients send vllm_omni_api_key)"),
    Setting("vllm_omni_hf_token", SECRET, None, "string (vault)",
            "Hugging Face token for a gated or private model (vllm_omni_model_source `hub`). Used on the controller "
            "only, through the environment; never written to a host, the plan or the output.",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9_-]{8,256}", "8-256 characters of A-Z a-z 0-9 _ -", "hf_...")),
    # Mooncake master (only for Mooncake store connectors; the PD path's MooncakeConnector needs none).
    Setting("vllm_omni_mooncake_master_enabled", DEPLOYMENT, False, "bool",
            "Run mooncake_master on the hosts of group vllm_omni_mooncake_master (default: the first engine host).",
            check_bool),
    Setting("vllm_omni_mooncake_master_rpc_port", DEPLOYMENT, 50051, "port", "mooncake_master RPC port.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_mooncake_master_metrics_port", DEPLOYMENT, 9003, "port",
            "mooncake_master HTTP port (/health, /metrics).", lambda v, n: check_int(v, n, 1024, 65535)),
    # Monitoring: Prometheus on the hosts of group vllm_omni_monitoring (default: the router host),
    # scraping every engine, router and Mooncake master target from the plan.
    Setting("vllm_omni_monitoring_enabled", DEPLOYMENT, False, "bool",
            "Install Prometheus (Debian/RHEL package) on the monitoring hosts with the plan's targets.",
            check_bool),
    Setting("vllm_omni_prometheus_port", DEPLOYMENT, 9090, "port", "Prometheus web/API port on the monitoring hosts.",
            lambda v, n: check_int(v, n, 1024, 65535)),
    Setting("vllm_omni_alert_ttft_seconds", DEPLOYMENT, 2.0, "seconds",
            "Alert rule TTFT objective: p99 time to first token of a pipeline over 10 minutes above this fires "
            "VllmOmniTTFTOverObjective.", lambda v, n: check_float(v, n, 0.0, 3600.0, low_open=True)),
    Setting("vllm_omni_alert_certificate_days", DEPLOYMENT, 14, "days",
            "Alert rule window: a front door certificate that expires in fewer days fires "
            "VllmOmniCertificateExpiresSoon (deploy renews the collection's own certificates within 30 days of expiry, "
            "so with 14 it fires only when no deploy ran in that time, or for your own certificate).",
            lambda v, n: check_int(v, n, 1, 365)),
    # Read by playbooks.
    Setting("vllm_omni_render_dir", PLAYBOOK, None, "path",
            "playbooks/render.yml: directory the plan and every pipeline's files are written to (controller).",
            lambda v, n: check_str(v, n, r"[A-Za-z0-9._/~-]+", "a directory path", "/srv/vllm-omni-render"),
            default_doc="required by render.yml"),
    Setting("vllm_omni_converge", PLAYBOOK, "auto", "`auto` or `full`",
            "playbooks/deploy.yml: `auto` skips every play after the checks when each host is exactly as the last whole "
            "deploy left it (same plan, collection, variables and TLS material; no file, unit, venv, artifact, kernel "
            "setting or firewall table changed; every service healthy). `full` runs every play "
            "(docs/operations.md, the no-op check).",
            lambda v, n: check_choice(v, n, ("auto", "full"))),
    Setting("vllm_omni_uninstall_purge_models", PLAYBOOK, False, "bool",
            "playbooks/uninstall.yml: also remove the model cache (HF_HOME) and the service users' homes.",
            check_bool),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
