"""What each engine process runs (plan/_engine_argv.py): environment and argv, single, head or headless, or simulated."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from unitlib import deployment_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _engine_argv
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._deployment import Deployment

MODEL = "Qwen/Qwen3-Omni-30B-A3B-Instruct"
IP = "10.0.0.11"
VENV = "/opt/vllm-omni/venvs/0.26.0"
BACKEND = {"venv": VENV}
PATHS = {"stage_config": "/etc/vllm-omni/omni0/stage_config.yaml"}
SIMULATOR = {"vllm_omni_engine_backend": "simulator"}
TEXT = {"vllm_omni_audio_output": False}
# A pd prefill process's ports with Mooncake (decode processes have no bootstrap).
MOONCAKE_PORTS = {"api": 8091, "bootstrap": 8998, "mooncake_rpc": (16000, 16063)}
DISTRIBUTED_PORTS = {"api": 8091, "master": 8400, "zmq": (20000, 20063)}


def deployment(**values) -> Deployment:
    return deployment_of(**values)


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


# --- environment --------------------------------------------------------------------------------------------------


def test_an_aggregated_engine_s_environment_is_exactly_the_base_variables_in_sorted_order():
    env = _engine_argv.environment(deployment(vllm_omni_layout="aggregated"), IP, [3, 1], {"api": 8091})
    cache = "/var/lib/vllm-omni/compile-cache/vllm-omni-0.26.0"
    assert env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,1", "DO_NOT_TRACK": "1",
        "HF_HOME": "/var/lib/vllm-omni/hf", "VLLM_HOST_IP": IP, "VLLM_NO_USAGE_STATS": "1",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton",
        "VLLM_CACHE_ROOT": f"{cache}/vllm"}
    assert list(env) == sorted(env)


def test_the_gpu_list_keeps_the_order_it_is_given_in_cuda_visible_devices():
    env = _engine_argv.environment(deployment(vllm_omni_layout="aggregated"), IP, [7, 2, 5], {})
    assert env["CUDA_VISIBLE_DEVICES"] == "7,2,5"


def test_a_mooncake_prefill_engine_gets_its_bootstrap_port_rpc_range_abort_timeout_and_tcp_pool():
    env = _engine_argv.environment(deployment(vllm_omni_mooncake_abort_timeout=300), IP, [0], MOONCAKE_PORTS)
    assert env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert (env["MC_MIN_RPC_PORT"], env["MC_MAX_RPC_PORT"]) == ("16000", "16063")
    assert env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] == "300"
    assert env["MC_TCP_ENABLE_CONNECTION_POOL"] == "1"
    assert not any(name.startswith(("UCX_", "VLLM_NIXL_")) for name in env)


def test_a_mooncake_decode_engine_without_a_bootstrap_port_runs_no_bootstrap_server():
    ports = {"api": 8092, "mooncake_rpc": (16064, 16127)}
    env = _engine_argv.environment(deployment(), IP, [1], ports)
    assert "VLLM_MOONCAKE_BOOTSTRAP_PORT" not in env
    assert (env["MC_MIN_RPC_PORT"], env["MC_MAX_RPC_PORT"]) == ("16064", "16127")
    assert env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] == "120"  # the setting's default


def test_mooncake_over_rdma_gets_no_tcp_connection_pool():
    context = deployment(vllm_omni_mooncake_protocol="rdma", vllm_omni_mooncake_rdma_devices=["mlx5_0"])
    env = _engine_argv.environment(context, IP, [0], MOONCAKE_PORTS)
    assert "MC_TCP_ENABLE_CONNECTION_POOL" not in env
    assert env["MC_MIN_RPC_PORT"] == "16000"


def test_a_nixl_engine_gets_its_side_channel_host_and_ucx_port_range_and_no_mooncake_variables():
    ports = {"api": 8091, "nixl_side_channel": {"prefill": 5600}, "ucx_tcp": (17000, 17031)}
    env = _engine_argv.environment(deployment(vllm_omni_kv_connector="nixl"), IP, [0], ports)
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == IP
    assert env["UCX_TCP_PORT_RANGE"] == "17000-17031"
    assert not any(name.startswith(("MC_", "VLLM_MOONCAKE_")) for name in env)


def test_an_aggregated_engine_gets_no_kv_transfer_variables_even_with_kv_ports_given():
    env = _engine_argv.environment(deployment(vllm_omni_layout="aggregated"), IP, [0], MOONCAKE_PORTS)
    assert not any(name.startswith(("MC_", "VLLM_MOONCAKE_", "UCX_", "VLLM_NIXL_")) for name in env)


def test_a_distributed_process_pins_vllm_port_to_the_first_port_of_its_zmq_slice():
    env = _engine_argv.environment(deployment(**TEXT), IP, [0], {**MOONCAKE_PORTS, "zmq": (20064, 20127)})
    assert env["VLLM_PORT"] == "20064"
    assert "VLLM_PORT" not in _engine_argv.environment(deployment(**TEXT), IP, [0], MOONCAKE_PORTS)


def test_without_staging_or_a_model_source_the_engine_downloads_online():
    env = _engine_argv.environment(deployment(), IP, [0], MOONCAKE_PORTS)
    assert "HF_HUB_OFFLINE" not in env and "VLLM_OMNI_MODEL_SNAPSHOT" not in env


def test_operator_staged_weights_run_offline_without_a_snapshot_variable():
    env = _engine_argv.environment(deployment(vllm_omni_model_staging=True), IP, [0], MOONCAKE_PORTS)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "VLLM_OMNI_MODEL_SNAPSHOT" not in env


def test_a_staged_model_source_runs_offline_and_names_the_snapshot_revision():
    revision = "5d4d1c4e1e0b8a7b2d3c6f9e8a7b6c5d4e3f2a1b"
    context = deployment(vllm_omni_model_source="hub", vllm_omni_model_revision=revision)
    env = _engine_argv.environment(context, IP, [0], MOONCAKE_PORTS)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_OMNI_MODEL_SNAPSHOT"] == revision


def test_extra_env_is_added_and_the_result_stays_sorted():
    context = deployment(vllm_omni_layout="aggregated", vllm_omni_extra_env={"NCCL_IB_DISABLE": "1", "AAA_FIRST": "x"})
    env = _engine_argv.environment(context, IP, [0], {})
    assert env["NCCL_IB_DISABLE"] == "1" and env["AAA_FIRST"] == "x"
    assert next(iter(env)) == "AAA_FIRST" and list(env) == sorted(env)


def test_the_hf_home_setting_becomes_hf_home():
    env = _engine_argv.environment(deployment(vllm_omni_hf_home="/srv/hf"), IP, [0], MOONCAKE_PORTS)
    assert env["HF_HOME"] == "/srv/hf"


# --- argv: one process per pipeline ---------------------------------------------------------------------------------


def test_a_single_process_engine_runs_vllm_serve_omni_with_exactly_these_flags():
    assert _engine_argv.argv(deployment(), BACKEND, IP, {"api": 8091}, PATHS) == [
        f"{VENV}/bin/vllm", "serve", MODEL, "--omni", "--host", IP, "--port", "8091",
        "--served-model-name", MODEL, "--stage-configs-path", PATHS["stage_config"],
        "--init-timeout", "1800", "--stage-init-timeout", "1800", "--log-stats"]


def test_the_served_model_name_and_init_timeout_come_from_their_settings():
    context = deployment(vllm_omni_served_model_name="omni", vllm_omni_init_timeout=600)
    argv = _engine_argv.argv(context, BACKEND, IP, {"api": 9000}, PATHS)
    assert flag(argv, "--served-model-name") == "omni" and argv[2] == MODEL
    assert flag(argv, "--init-timeout") == "600" == flag(argv, "--stage-init-timeout")
    assert flag(argv, "--port") == "9000"


def test_a_version_with_the_deploy_schema_passes_its_stage_config_with_deploy_config():
    context = deployment(vllm_omni_version="0.30.0", vllm_omni_layout="aggregated")
    argv = _engine_argv.argv(context, {"venv": "/opt/v/0.30.0"}, IP, {"api": 8091}, PATHS)
    assert flag(argv, "--deploy-config") == PATHS["stage_config"]
    assert "--stage-configs-path" not in argv and argv[0] == "/opt/v/0.30.0/bin/vllm"


def test_the_simulator_runs_xpyd_sim_in_dual_mode_under_the_served_name():
    context = deployment(**SIMULATOR, vllm_omni_served_model_name="omni")
    assert _engine_argv.argv(context, BACKEND, IP, {"api": 8091}, PATHS) == [
        f"{VENV}/bin/xpyd-sim", "serve", "--mode", "dual", "--host", IP, "--port", "8091", "--model", "omni"]


# --- argv: distributed pipelines -----------------------------------------------------------------------------------


def test_a_head_runs_the_single_process_argv_plus_stage_0_and_its_own_master():
    context = deployment(**TEXT, vllm_omni_replica_lb_policy="round-robin")
    head = _engine_argv.head_argv(context, BACKEND, IP, DISTRIBUTED_PORTS, PATHS, [("decode", "http://10.0.0.12:8092")])
    single = _engine_argv.argv(context, BACKEND, IP, DISTRIBUTED_PORTS, PATHS)
    assert head == [*single, "--stage-id", "0", "--omni-master-address", IP, "--omni-master-port", "8400",
                    "--omni-lb-policy", "round-robin"]
    assert "http://10.0.0.12:8092" not in head  # the engine's head finds its remote stages through the master


def test_a_simulated_head_is_a_pd_router_with_prefill_0_beside_it_on_loopback():
    remote = [("decode", "http://10.0.0.12:8092"), ("prefill", "http://10.0.0.12:8093"),
              ("decode", "http://10.0.0.13:8092")]
    head = _engine_argv.head_argv(deployment(**SIMULATOR, **TEXT), BACKEND, IP, DISTRIBUTED_PORTS, PATHS, remote)
    assert head[:4] == ["/bin/sh", "-c",
                        f'{VENV}/bin/xpyd-sim serve --mode prefill --host 127.0.0.1 --port 8400 --model {MODEL} '
                        '& exec "$@"', "sh"]
    assert head[4:] == [
        f"{VENV}/bin/vllm-router", "--host", IP, "--port", "8091", "--vllm-pd-disaggregation",
        "--policy", "round_robin", "--prefill", "http://127.0.0.1:8400",
        "--decode", "http://10.0.0.12:8092", "--prefill", "http://10.0.0.12:8093", "--decode", "http://10.0.0.13:8092",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", "20000",
        "--health-check-interval-secs", "5", "--worker-startup-timeout-secs", "600",
        "--worker-startup-check-interval", "2"]


def test_a_headless_engine_registers_with_the_head_s_master_and_gets_no_host_or_port_flag():
    argv = _engine_argv.headless_argv(deployment(**TEXT), BACKEND, "10.0.0.12", {"api": 8092, "zmq": (20064, 20127)},
                                      PATHS, 2, "decode", ("10.0.0.11", 8400))
    assert argv == [
        f"{VENV}/bin/vllm", "serve", MODEL, "--omni", "--headless", "--stage-configs-path", PATHS["stage_config"],
        "--stage-init-timeout", "1800", "--stage-id", "2", "--omni-master-address", "10.0.0.11",
        "--omni-master-port", "8400", "--omni-replica-address", "10.0.0.12", "--log-stats"]
    assert "--port" not in argv and "--host" not in argv and "--init-timeout" not in argv


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_simulated_headless_engine_is_an_xpyd_sim_stand_in_of_its_role_on_its_api_port(role):
    argv = _engine_argv.headless_argv(deployment(**SIMULATOR, **TEXT), BACKEND, "10.0.0.12", {"api": 8093}, PATHS, 1,
                                      role, ("10.0.0.11", 8400))
    assert argv == [f"{VENV}/bin/xpyd-sim", "serve", "--mode", role, "--host", "10.0.0.12", "--port", "8093",
                    "--model", MODEL]


# --- a distributed head's stop (ExecStop=) ---------------------------------------------------------------

LINGERING_SERVER = r"""
import os, signal, socket, sys, time
hold_s, with_child = float(sys.argv[1]), sys.argv[2] == "child"
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen()
if with_child and os.fork() == 0:  # a stage process: it inherits the listening socket and holds it while it lives
    time.sleep(60)
    os._exit(0)
print(listener.getsockname()[1], flush=True)
clients = []
def on_term(*_args):
    # As vLLM-Omni 0.26's head: the HTTP server lets go of its port (after its clients, here hold_s), then the
    # process lingers (the orchestrator join) before it exits.
    listener.close()
    time.sleep(hold_s)
    for client in clients:
        client.close()
    time.sleep(30)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
listener.settimeout(0.1)
while True:
    try:
        clients.append(listener.accept()[0])
    except (TimeoutError, OSError):
        pass
"""


@pytest.fixture
def lingering_head():
    """A head stand-in: on SIGTERM it closes its listener, keeps its clients ``hold_s`` more seconds, then lingers
    30 s; ``child``: a stage process beside it holds the inherited listener; ``session``: in a session of its own,
    as systemd starts a unit's main process."""
    started = []

    def start(hold_s: float, client: bool, child: bool = False, session: bool = True):
        server = subprocess.Popen([sys.executable, "-c", LINGERING_SERVER, str(hold_s), "child" if child else "alone"],
                                  stdout=subprocess.PIPE, text=True, start_new_session=session)
        started.append((server, session))
        port = int(server.stdout.readline())
        connection = socket.create_connection(("127.0.0.1", port)) if client else None
        time.sleep(0.3)  # accepted
        return server, port, connection

    yield start
    for server, session in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL) if session else server.kill()
        server.wait()


def run_exec_stop(pid: int, port: int) -> float:
    started = time.monotonic()
    done = subprocess.run(_engine_argv.head_exec_stop(port), env={"MAINPID": str(pid), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done
    return time.monotonic() - started


def test_a_head_s_stop_returns_once_its_port_is_closed_not_when_the_process_exits(lingering_head):
    # Its stage process holds the listener too: the whole group gets SIGTERM (the main process alone would leave
    # the port open for the 30 s: on the H200, 30.31 s).
    server, port, _unused = lingering_head(0, client=False, child=True)
    seconds = run_exec_stop(server.pid, port)
    assert seconds < 2, seconds
    assert server.poll() is None  # still in its 30 s linger: the unit's KillSignal=SIGKILL ends it


def test_a_main_process_that_leads_no_group_gets_the_sigterm_alone(lingering_head):
    server, port, _unused = lingering_head(0, client=False, session=False)
    assert run_exec_stop(server.pid, port) < 2
    assert server.poll() is None


def test_a_head_s_stop_waits_for_its_open_connections(lingering_head):
    server, port, connection = lingering_head(2, client=True)
    seconds = run_exec_stop(server.pid, port)
    assert 2 <= seconds < 4, seconds
    assert server.poll() is None
    connection.close()


def test_a_head_s_stop_ends_when_its_process_exits_or_is_already_gone():
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    assert run_exec_stop(int(gone.stdout), 1) < 1  # no such process: nothing to stop
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], start_new_session=True)
    assert run_exec_stop(quick.pid, 9) < 2.5  # SIGTERM ends it (no port of its own): the loop ends with it
    quick.wait()


def test_only_a_head_gets_a_stop_and_its_drop_in_sends_sigkill_after_it():
    from unitlib import inventory

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import dropin_text

    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0]},
             "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}}
    plan = build_plan(inventory(hosts, {"vllm_omni_audio_output": False}))
    processes = {p["name"]: p for host in plan["hosts"].values() for p in host["pipelines"]}
    heads = [p for p in processes.values() if p.get("process") == "head"]
    assert heads and all(p["exec_stop"] == _engine_argv.head_exec_stop(p["ports"]["api"]) for p in heads)
    assert all("exec_stop" not in p for p in processes.values() if p.get("process") != "head")
    text = dropin_text(heads[0])
    assert text.endswith("KillSignal=SIGKILL\nSuccessExitStatus=SIGKILL\n")
    assert 'ExecStop=/bin/sh -c "kill -0 \\"$$MAINPID\\"' in text
    assert all("ExecStop" not in dropin_text(p) for p in processes.values() if p.get("process") != "head")
