# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""What each engine process runs: its environment (``engine.env``) and its argv, single-process, head and
headless, real engine or simulator."""

from __future__ import annotations

from ..host import _names
from ._deployment import Deployment


def environment(deployment: Deployment, ip: str, gpus: list[int], ports: dict) -> dict[str, str]:
    """The process's environment. ``ports`` with ``zmq`` (distributed processes): VLLM_PORT pins the
    ports vLLM and vLLM-Omni draw for themselves (the master's routes, the coordinator) to its slice."""
    process, kv = deployment.process_settings, deployment.kv_settings
    env = {
        # Stage `devices` are indices into this list; PCI order makes them match nvidia-smi.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
        # Multi-homed hosts otherwise advertise the default route's address (vLLM #42023).
        "VLLM_HOST_IP": ip,
        "HF_HOME": process.hf_home,
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if process.backend == "engine":
        # Compile caches kept across restarts, out of /tmp (PrivateTmp); vLLM points Inductor into its own root for
        # what it compiles, these hold the rest. Both 0.26 stages save their AOT artifact there
        # (record/gpu-evidence.md run 13).
        cache = _names.compile_cache_dir(deployment.engine.version)
        env.update({"VLLM_CACHE_ROOT": f"{cache}/vllm", "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
                    "TRITON_CACHE_DIR": f"{cache}/triton"})
    if process.model_staging or process.model_source != "none":
        env["HF_HUB_OFFLINE"] = "1"
    if process.model_source != "none":
        # The staged snapshot (refs/main points at it): a new revision changes this file and restarts the engine.
        env["VLLM_OMNI_MODEL_SNAPSHOT"] = process.model_revision
    if "nixl_side_channel" in ports:
        # Where this host's NIXL engines listen for handshakes and what they tell decode; each engine's own
        # port is in its stage config (ServeNixlConnector), since one environment serves both stages.
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = ip
        env["UCX_TCP_PORT_RANGE"] = f"{ports['ucx_tcp'][0]}-{ports['ucx_tcp'][1]}"
    elif kv.layout == "pd":
        if "bootstrap" in ports:  # a prefill engine's bootstrap server (decode engines run none)
            env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(ports["bootstrap"])
        env["MC_MIN_RPC_PORT"] = str(ports["mooncake_rpc"][0])
        env["MC_MAX_RPC_PORT"] = str(ports["mooncake_rpc"][1])
        # How long prefill keeps KV nobody pulled (decode: +60 s on its pull); vLLM's 480 s default holds a dead
        # decode's share of prefill's KV cache for 8 minutes (vllm_omni_mooncake_abort_timeout).
        env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] = str(kv.mooncake_abort_timeout)
        if kv.mooncake_protocol == "tcp":
            # Without the pool, TCP transfers under load exhaust ephemeral ports (TIME_WAIT).
            env["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
    if "zmq" in ports:
        env["VLLM_PORT"] = str(ports["zmq"][0])
    env.update(process.extra_env)
    return dict(sorted(env.items()))


def argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict) -> list[str]:
    process, engine, served = deployment.process_settings, deployment.engine, deployment.served
    if process.backend == "simulator":
        return [f"{backend['venv']}/bin/xpyd-sim", "serve", "--mode", "dual", "--host", ip,
                "--port", str(ports["api"]), "--model", served]
    timeout = str(process.init_timeout)
    return [
        f"{backend['venv']}/bin/vllm", "serve", process.model, "--omni",
        "--host", ip, "--port", str(ports["api"]),
        "--served-model-name", served,
        engine.config_flag, paths["stage_config"],
        "--init-timeout", timeout, "--stage-init-timeout", timeout,
        # /metrics: vLLM-Omni's is empty without it (data/metrics.yml lists what it then exports).
        "--log-stats",
    ]


def head_argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict,
              remote_engines: list[tuple[str, str]]) -> list[str]:
    """The head of a distributed pipeline: API server, orchestrator, OmniMasterServer and stage 0 (prefill 0).

    Simulator: vllm-router in PD mode stands in for the head (it sends each request to a prefill then a
    decode stand-in, round-robin over the replicas), with prefill 0's stand-in started beside it on
    loopback at the master port. ``remote_engines``: (role, stand-in URL) of the other engines.
    """
    process = deployment.process_settings
    if process.backend == "simulator":
        local = f"http://127.0.0.1:{ports['master']}"
        first = (f"{backend['venv']}/bin/xpyd-sim serve --mode prefill --host 127.0.0.1 --port {ports['master']} "
                 f"--model {deployment.served}")
        router = [f"{backend['venv']}/bin/vllm-router", "--host", ip, "--port", str(ports["api"]),
                  "--vllm-pd-disaggregation", "--policy", "round_robin", "--prefill", local]
        for role, url in remote_engines:
            router += [f"--{role}", url]
        router += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(ports["zmq"][0]),
                   "--health-check-interval-secs", "5", "--worker-startup-timeout-secs", "600",
                   "--worker-startup-check-interval", "2"]
        # sh: both processes in the unit's cgroup; stopping the unit stops both, the router is the main one.
        return ["/bin/sh", "-c", f'{first} & exec "$@"', "sh", *router]
    return [*argv(deployment, backend, ip, ports, paths), "--stage-id", "0",
            "--omni-master-address", ip, "--omni-master-port", str(ports["master"]),
            "--omni-lb-policy", process.replica_lb_policy]


def headless_argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict, stage_id: int,
                  role: str, master: tuple[str, int]) -> list[str]:
    """A headless stage of a distributed pipeline: registers with the head's master at ``master``.

    Simulator: an xpyd-sim prefill or decode stand-in on the process's API port, which the head's
    stand-in router calls.
    """
    process = deployment.process_settings
    if process.backend == "simulator":
        return [f"{backend['venv']}/bin/xpyd-sim", "serve", "--mode", role, "--host", ip,
                "--port", str(ports["api"]), "--model", deployment.served]
    return [
        f"{backend['venv']}/bin/vllm", "serve", process.model, "--omni", "--headless",
        deployment.engine.config_flag, paths["stage_config"],
        "--stage-init-timeout", str(process.init_timeout),
        "--stage-id", str(stage_id), "--omni-master-address", master[0], "--omni-master-port", str(master[1]),
        "--omni-replica-address", ip, "--log-stats",
    ]


def head_exec_stop(api_port: int) -> list[str]:
    """A distributed head's ExecStop=: SIGTERM to its process group (the unit's processes: systemd starts the main
    process in a session of its own; the main process alone where it is not a group leader), then wait while the
    main process lives and its API port still listens or holds a connection (established, or closed by the client
    only); the unit's KillSignal=SIGKILL then takes what is left. vLLM-Omni 0.26's head finishes its HTTP server
    at once but then waits out a 30 s orchestrator join its own membership watcher holds up: on an H200 a head's
    stop took 30.35 s this way and 0.31 s with this stop (record/gpu-evidence.md, run 10). The whole group, not the
    main process alone: the engine's stage processes inherit the listening socket and keep the port open until
    they go. MAINPID is in the environment of a unit's control processes; /proc/net/tcp6 may be absent (grep -q
    still answers a match)."""
    port = f"{api_port:04X}"
    return ["/bin/sh", "-c",
            'kill -0 "$MAINPID" 2>/dev/null || exit 0; kill -s TERM -- "-$MAINPID" 2>/dev/null || kill -s TERM "$MAINPID"; '
            f'while kill -0 "$MAINPID" 2>/dev/null && grep -qE "^ *[0-9]+: [0-9A-F]+:{port} [0-9A-F]+:[0-9A-F]+ (0A|01|08) " '
            "/proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.2; done"]
