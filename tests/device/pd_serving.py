"""Serve the collection's own renders with the real engine on the device machine, and measure.

Run on the device machine (one H200, no network) by ``tests/device/pd_serving.sh run``, after
``tests/device/prepare.sh`` built the payload here and ``pd_serving.sh stage`` carried it over
(record/gpu-evidence.md has the whole procedure). Standard library only: it runs with the machine's
own ``python3`` before anything is installed.

What it does, per scenario (a render of one ``tests/device/inventories/*.yml``):

1. lays the render's files where the plan says a deploy puts them (stage config and engine.env
   under the config root, the engine venv at the plan's venv path, holding the staged packages and
   the collection's KV connector module installed the way the engine role installs it);
2. starts the pipeline with exactly the unit's argv and engine.env, plus what a deploy adds on the
   host (the API key) and what this machine needs because its packages were staged rather than
   installed (``STAGING_ENV``), as root rather than the unit's user, without the systemd sandbox;
3. waits for ``/health``, then sends streamed chat completions (warm-up, short and long prompts
   one at a time, then concurrent ones), a request without the key, and on PD one whose first
   token is forced to end-of-sequence; records status, time to first token (TTFT), inter-token
   latency (ITL) and tokens per request;
4. judges from the engine's log, request by request, whether each went prefill -> KV transfer ->
   decode (the collection's own judge, ``plugins/plugin_utils/runtime/_pd_evidence.py``), and collects the
   bootstrap server's ``/query`` and Mooncake's listening ports (NIXL: its side channels and UCX ports)
   and the engine's failure lines;
5. stops the pipeline (its whole process group) and moves on.

A scenario given as ``NAME=RENDER:stock`` runs with vLLM's own MooncakeConnector instead of the
collection's (the stage config's two connector keys rewritten): the control that shows the failure
the connector exists for. ``NAME=RENDER:sandbox`` runs the pipeline the way its systemd unit would:
as the unit's user with the footprint's owners and modes, through ``tests/device/sandbox.py`` (no
capabilities, no_new_privs, a private /tmp, everything but the unit's ReadWritePaths read-only; that
script says what it emulates and what not).

Before the scenarios, the engine venv's packages are compared with the lock the payload was built
from (``tests/device/payload.json``): every package it carries must be at the lock's version, and for
every lock package it does not carry the table shows what the venv finds instead (this machine's
copy, or nothing). ``--compile-bytecode`` first compiles the staged packages and this machine's
site-packages (``python -m compileall``), as the collection does when it builds a venv, so a
read-only venv starts as fast as a writable one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins" / "plugin_utils" / "runtime"))
import _pd_evidence  # the collection's judge, stdlib-only

# The unpacked payload and the tiny model, outside /root (the engine unit has ProtectHome); a rehearsal moves it.
STAGE = Path(os.environ.get("DEVICE_STAGE", "/srv/stage"))
# What build_payload.py carried, and the lock it came from (DEVICE_PAYLOAD: payload-0.30.0.json for vLLM-Omni 0.30.0).
PAYLOAD = REPO / os.environ.get("DEVICE_PAYLOAD", "tests/device/payload.json")
API_KEY = "device-run-" + "k" * 24  # a deploy writes the vault key into engine.env; any valid key does here
# Only because the packages were staged, not installed: Mooncake's Debian libraries, and no
# flashinfer wheel was carried (vLLM's sampler then uses its own kernels).
STAGING_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
FAILURE_LINES = re.compile(r"Missing prefill kv_transfer_params|EngineDeadError|initialization failed|"
                           r"Traceback|device-side assert|CUDA error|RuntimeError|Error", re.I)
LONG_PROMPT = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog near river {i}." for i in range(120))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- set-up -----------------------------------------------------------------------------------


def read_argv(path: Path) -> list[str]:
    return path.read_text().splitlines()


def read_env(path: Path) -> dict[str, str]:
    """An EnvironmentFile as systemd reads the collection's (KEY="value" lines, # comments)."""
    env = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _sep, value = line.partition("=")
        env[key.strip()] = value.strip().removeprefix('"').removesuffix('"')
    return env


def torch_site() -> str:
    if os.environ.get("DEVICE_TORCH_SITE"):  # a rehearsal without torch
        return os.environ["DEVICE_TORCH_SITE"]
    out = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def make_venv(venv: Path) -> dict:
    """The plan's engine venv: this machine's torch stack, the staged packages, and our connector."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # .pth files are read in name order: staged packages first, then the machine's torch venv.
    (purelib / "00-staged.pth").write_text(f"{STAGE / 'site'}\n")
    (purelib / "01-machine-torch.pth").write_text(torch_site() + "\n")
    launcher = venv / "bin" / "vllm"  # vllm's console script (entry point vllm.entrypoints.cli.main:main)
    # The guard matters: stage processes are spawned, and spawn re-imports __main__ (this file).
    launcher.write_text(f"#!{python}\nimport sys\nfrom vllm.entrypoints.cli.main import main\n"
                        "if __name__ == '__main__':\n    sys.exit(main())\n")
    launcher.chmod(0o755)
    return {"venv": str(venv), "purelib": str(purelib)}


def install_connector(plan: dict, purelib: str) -> str | None:
    """What the engine role does: the engine plugin's files (roles/engine/files/engine_plugin: the KV connectors
    and the fixes, an installed distribution) into the venv's site-packages; the connector module's path."""
    plugin = plan["backend"].get("engine_plugin")
    if not plugin:
        return None
    for earlier in Path(purelib).glob("vllm_omni_serve_engine-*.dist-info"):
        shutil.rmtree(earlier)
    shutil.copytree(REPO / "roles" / "engine" / "files" / plugin["files"], purelib, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    connector = plan["backend"].get("kv_connector")
    return str(Path(purelib) / f"{connector['module']}.py") if connector else None


def lay_out(render: Path, plan: dict, host: str | None = None, name: str | None = None) -> dict:
    """Copy one process's files from the render to the paths the plan names; return its pipeline entry.

    Without ``host``/``name`` the plan must have one host with one pipeline (every single-host device
    inventory); a render spanning hosts (tests/device/span_serving.py) names the process it wants."""
    if host is None:
        (host, host_plan), = plan["hosts"].items()
    else:
        host_plan = plan["hosts"][host]
    pipeline, = [p for p in host_plan["pipelines"] if name is None or p["name"] == name]
    source = render / host / pipeline["name"]
    config_dir = Path(pipeline["paths"]["config_dir"])
    config_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "stage_config.yaml", pipeline["paths"]["stage_config"])
    shutil.copyfile(source / "engine.env", pipeline["paths"]["env_file"])
    Path(pipeline["environment"]["HF_HOME"]).mkdir(parents=True, exist_ok=True)
    Path(plan["paths"]["engine_home"]).mkdir(parents=True, exist_ok=True)
    assert read_argv(source / "argv") == pipeline["argv"], "the render's argv file and plan.json disagree"
    return pipeline


def use_stock_connector(stage_config: Path) -> None:
    """The negative control: vLLM's own MooncakeConnector in both PD stages."""
    text = stage_config.read_text()
    text = re.sub(r"kv_connector: \S+", "kv_connector: MooncakeConnector", text)
    text = re.sub(r"\n\s*kv_connector_module_path: \S+", "", text)
    stage_config.write_text(text)


VERSION_PROBE = """
import importlib.metadata as md, json, sys
found = {}
for name in json.load(sys.stdin):
    try:
        dist = md.distribution(name)
        found[name] = [dist.version, str(dist.locate_file(""))]
    except md.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def lock_versions(python: str) -> dict:
    """Every package of the payload's lock against what the engine venv finds (first on its path)."""
    payload = json.loads(PAYLOAD.read_text())
    lock = {p["name"]: p["version"] for p in payload["packages"]}
    carried = set(lock)
    for entry in (*payload.get("from_machine", []), *payload.get("not_carried", [])):
        lock[entry["name"]] = entry["version"]
    done = subprocess.run([python, "-c", VERSION_PROBE], input=json.dumps(sorted(lock)), capture_output=True,
                          text=True, check=True)
    found = json.loads(done.stdout)
    rows = []
    for name in sorted(lock):
        hit = found.get(name)
        where = "absent" if hit is None else ("carried" if hit[1].startswith(str(STAGE / "site")) else "machine")
        rows.append({"name": name, "lock": lock[name], "venv": hit[0] if hit else None, "from": where,
                     "planned": "carried" if name in carried else "machine"})
    carried_rows = [r for r in rows if r["planned"] == "carried"]
    other = [r for r in rows if r["planned"] != "carried"]
    result = {
        "lock": payload.get("lock"),
        "carried": len(carried_rows),
        "carried_at_lock_version": sum(r["venv"] == r["lock"] and r["from"] == "carried" for r in carried_rows),
        "carried_wrong": [r for r in carried_rows if r["venv"] != r["lock"] or r["from"] != "carried"],
        "not_carried": other,
        "not_carried_same": sum(r["venv"] == r["lock"] for r in other),
        "not_carried_differ": [r for r in other if r["venv"] != r["lock"]],
    }
    log(f"lock {(payload.get('lock') or {}).get('path')}: {result['carried_at_lock_version']} of {len(carried_rows)} "
        f"carried packages at the lock's version; of {len(other)} not carried, {result['not_carried_same']} "
        f"found at the lock's version on this machine, {len(result['not_carried_differ'])} differ:")
    print(f"  {'package':32} {'lock':24} {'this machine':24}", flush=True)
    for row in result["carried_wrong"] + result["not_carried_differ"]:
        print(f"  {row['name']:32} {row['lock']:24} {row['venv'] or '-':24} "
              f"{'CARRIED BUT ' + row['from'] if row['planned'] == 'carried' else ''}", flush=True)
    return result


def compile_bytecode() -> dict:
    """What the collection does at venv build: python -m compileall over everything the venv imports."""
    timings = {}
    for label, root in (("staged", str(STAGE / "site")), ("machine", torch_site())):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", root], capture_output=True,
                              text=True, check=False)
        timings[label] = {"path": root, "seconds": round(time.monotonic() - started, 1), "rc": done.returncode,
                          "not_compiled": re.findall(r"\*\*\* Error compiling '([^']+)'", done.stdout + done.stderr)}
        log(f"compileall {root}: {timings[label]}")
    return timings


def run_quiet(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def ensure_account(user: str, group: str, home: str) -> None:
    """The engine user and group, as the engine role creates them (system account, no login)."""
    if run_quiet("getent", "group", group).returncode != 0:
        run_quiet("groupadd", "--system", group)
    if run_quiet("getent", "passwd", user).returncode != 0:
        run_quiet("useradd", "--system", "--gid", group, "--home-dir", home, "--no-create-home",
                  "--shell", "/usr/sbin/nologin", user)
    for name, database in ((group, "group"), (user, "passwd")):
        if run_quiet("getent", database, name).returncode != 0:
            raise RuntimeError(f"could not create the {database} entry {name}")


def set_owner(path: str, owner: str, group: str, mode: str) -> None:
    shutil.chown(path, owner, group)
    os.chmod(path, int(mode, 8))


def prepare_sandbox(plan: dict, pipeline: dict) -> dict:
    """The footprint's accounts, owners and modes for the engine (what the engine role lays down)."""
    (host, footprint), = plan["footprint"].items()
    account = next(a for a in footprint["accounts"] if a["component"] == "engine")
    ensure_account(account["user"], account["group"], account["home"])
    home = account["home"]
    os.makedirs(home, exist_ok=True)
    for root, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            shutil.chown(os.path.join(root, name), account["user"], account["group"])
    set_owner(home, account["user"], account["group"], "0750")
    applied = []
    for entry in (*footprint["directories"], *footprint["files"]):
        if entry["component"] == "engine" and os.path.exists(entry["path"]):
            set_owner(entry["path"], entry["owner"], entry["group"], entry["mode"])
            applied.append(f"{entry['path']} {entry['owner']}:{entry['group']} {entry['mode']}")
    return {"host": host, "user": account["user"], "group": account["group"], "home": home, "footprint": applied}


def fresh_home(home: str, keep_compile_cache: str | None = None) -> None:
    """Every start begins with an empty engine home (no Triton or CUDA JIT caches from an earlier start), except,
    for a warm restart, the plan's compile cache (``keep_compile_cache``: its path), as a host's unit keeps it
    across restarts. (Run 12's "warm" start had lost it here, at this wipe: record/gpu-evidence.md.)"""
    keep = {"hf"}
    if keep_compile_cache:
        keep.add(Path(keep_compile_cache).relative_to(home).parts[0])
    for entry in Path(home).iterdir() if Path(home).is_dir() else []:
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# --- the engine -------------------------------------------------------------------------------


def nvidia_smi(*args: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=False).stdout.strip()
    except FileNotFoundError:  # a rehearsal on a machine without GPUs
        return ""


def listening_ports() -> list[int]:
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def http(method: str, url: str, body: dict | None = None, key: str | None = API_KEY, timeout: float = 120):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http:// of our own engine
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - as above
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError) as error:
        return None, str(error).encode()


class Engine:
    """One engine unit's process (a pipeline, or one process of a distributed pipeline), started the way its
    systemd unit would start it, in a session of its own (the stand-in for the unit's cgroup)."""

    def __init__(self, pipeline: dict, name: str, logs: Path, home: str, sandbox: list[str] | None = None,
                 env_overrides: dict[str, str] | None = None):
        self.pipeline = pipeline
        self.sandbox = sandbox or []  # tests/device/sandbox.py and its options, or nothing (as root)
        self.log_path = logs / f"{name}.log"
        env = read_env(Path(pipeline["paths"]["env_file"]))
        # The secrets block the engine role appends on a host (roles/engine/templates/secrets.env.j2): the key under
        # the plan's api_key_env; a headless stage serves no HTTP and gets none.
        key_env = pipeline.get("api_key_env", "VLLM_API_KEY")
        if key_env:
            env[key_env] = API_KEY
        env.update(STAGING_ENV)
        # What only this one machine needs (two inventory hosts sharing one port space); the caller says why.
        env.update(env_overrides or {})
        self.env_overrides = dict(env_overrides or {})
        env["HOME"] = home  # the unit's WorkingDirectory and the engine user's home
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(STAGE / "lib"), os.environ.get("LD_LIBRARY_PATH", "")) if p)
        for key, value in os.environ.items():  # this machine's NVLink-multicast-off settings must stay
            # FAKE_ENGINE_*: only the CPU rehearsal's stand-in reads them (its scaled-down timeouts).
            if key.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_", "FAKE_ENGINE_")):
                env[key] = value
        self.env = env
        self.process: subprocess.Popen | None = None
        self.handle = None
        self.started = 0.0
        self.launches = 0

    def start(self) -> None:
        """Start the unit's argv; a second start (a restart) appends to the same log, after a marker line."""
        if self.handle is not None:
            self.handle.close()
        self.handle = self.log_path.open("a" if self.launches else "w")
        argv = [*self.sandbox, *self.pipeline["argv"]]
        marker = f"# ===== launch {self.launches + 1} at {time.strftime('%H:%M:%S')} =====\n" if self.launches else ""
        self.handle.write(f"{marker}$ {' '.join(argv)}\n# env: {json.dumps(sorted(self.env))}\n")
        self.handle.flush()
        self.started = time.monotonic()
        self.launches += 1
        self.process = subprocess.Popen(argv, env=self.env, stdout=self.handle,
                                        stderr=subprocess.STDOUT, start_new_session=True, cwd=self.env["HOME"])

    def session_pids(self) -> list[int]:
        """Every live process of this unit: its session (what systemd's cgroup would hold)."""
        return session_pids(self.process.pid) if self.process else []

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float) -> dict:
        url = self.pipeline["url"] + "/health"
        while time.monotonic() - self.started < timeout:
            if self.process.poll() is not None:
                return {"ready": False, "why": f"exited with {self.process.returncode}",
                        "seconds": round(time.monotonic() - self.started, 1)}
            status, _unused = http("GET", url, key=None, timeout=5)
            if status == 200:
                return {"ready": True, "seconds": round(time.monotonic() - self.started, 1)}
            if "initialization failed" in self.text():
                return {"ready": False, "why": "initialization failed",
                        "seconds": round(time.monotonic() - self.started, 1)}
            time.sleep(2)
        return {"ready": False, "why": f"no /health 200 within {timeout:.0f}s", "seconds": timeout}

    def alive(self) -> dict:
        status, _unused = http("GET", self.pipeline["url"] + "/health", key=None, timeout=10)
        return {"process_running": self.process.poll() is None, "health": status}

    def stop(self, sweep_gpu: bool = True) -> None:
        """Stop the unit: SIGTERM to its session, SIGKILL after 30 s. ``sweep_gpu``: then kill every process left
        on the GPU (false while another unit of the same run still serves on it)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        # Stage processes outlive their parent; they stay in its session (stand-in for the unit's cgroup).
        for pid in self.session_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if sweep_gpu:
            # Nothing of this run may hold the GPU for the next one.
            apps = nvidia_smi("--query-compute-apps=pid", "--format=csv,noheader").split()
            for pid in apps:
                if pid.isdigit() and int(pid) != os.getpid():
                    with contextlib.suppress(OSError):  # gone already
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(3)
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def session_pids(sid: int) -> list[int]:
    """The live processes whose session id is ``sid`` (/proc/PID/stat field 6), zombies left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return sorted(found)


# --- the client -------------------------------------------------------------------------------


def chat(pipeline: dict, model: str, request_id: str, prompt: str, max_tokens: int = 32, key: str | None = API_KEY,
         extra: dict | None = None, timeout: float = 180) -> dict:
    """One streamed chat completion: status, TTFT, inter-token gaps, tokens, text."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "modalities": ["text"],
            "max_tokens": max_tokens, "stream": True, "request_id": request_id, "ignore_eos": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    request = urllib.request.Request(pipeline["url"] + "/v1/chat/completions", data=json.dumps(body).encode(),  # noqa: S310
                                     method="POST", headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    sent = time.monotonic()
    result = {"request_id": request_id, "status": None, "ttft_s": None, "itl_s": [], "chunks": 0, "text": "",
              "usage": None, "error": None}
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the plan's engine URL
            result["status"] = response.status
            last = None
            for raw in response:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("error") or chunk.get("object") == "error":  # an error event inside a 200 stream
                    detail = chunk.get("error") or chunk
                    result["error"] = "stream error: " + str(detail.get("message") if isinstance(detail, dict)
                                                             else detail)[:280]
                if chunk.get("usage"):
                    result["usage"] = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if choice.get("finish_reason"):
                        result["finish_reason"] = choice["finish_reason"]
                    if delta:
                        now = time.monotonic()
                        if last is None:
                            result["ttft_s"] = now - sent
                        else:
                            result["itl_s"].append(now - last)
                        last = now
                        result["chunks"] += 1
                        result["text"] += delta
    except urllib.error.HTTPError as error:
        result["status"] = error.code
        result["error"] = error.read().decode(errors="replace")[:300]
    except (urllib.error.URLError, OSError, ValueError) as error:
        result["error"] = f"{type(error).__name__}: {error}"[:300]
    result["total_s"] = time.monotonic() - sent
    result["text"] = result["text"][:80]
    return result


def summary(results: list[dict]) -> dict:
    ok = [r for r in results if r["status"] == 200 and r["error"] is None and r["chunks"] > 0]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    itl = [gap for r in ok for gap in r["itl_s"]]

    def ms(values, q):
        if not values:
            return None
        values = sorted(values)
        return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 2)

    return {"requests": len(results), "ok": len(ok), "failed": len(results) - len(ok),
            "tokens": sum((r.get("usage") or {}).get("completion_tokens", r["chunks"]) for r in ok),
            "ttft_ms": {"p50": ms(ttft, 0.5), "p90": ms(ttft, 0.9), "mean": round(1000 * statistics.mean(ttft), 2)
                        if ttft else None},
            "itl_ms": {"p50": ms(itl, 0.5), "p90": ms(itl, 0.9), "mean": round(1000 * statistics.mean(itl), 2)
                       if itl else None},
            "errors": sorted({(r["status"], (r["error"] or "")[:120]) for r in results if r not in ok})[:5]}


def speech(pipeline: dict, model: str, request_id: str) -> dict:
    """One non-streamed completion asking for text and audio: status, seconds, what came back."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "modalities": ["text", "audio"],
            "max_tokens": 16, "request_id": request_id, "ignore_eos": True}
    sent = time.monotonic()
    status, raw = http("POST", pipeline["url"] + "/v1/chat/completions", body=body, timeout=300)
    result = {"request_id": request_id, "status": status, "seconds": round(time.monotonic() - sent, 2)}
    try:
        answer = json.loads(raw)
    except ValueError:
        return {**result, "error": raw.decode(errors="replace")[:300]}
    choices = answer.get("choices") or []
    result["choices"] = len(choices)
    result["audio_bytes_base64"] = sum(len(((c.get("message") or {}).get("audio") or {}).get("data") or "")
                                       for c in choices)
    result["text"] = next(((c.get("message") or {}).get("content") or "" for c in choices), "")[:60]
    if status != 200:
        result["error"] = json.dumps(answer)[:300]
    return result


def workload(pipeline: dict, model: str, tag: str, pd: bool, audio: bool = False) -> dict:
    rid = f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{tag}"
    out: dict = {}
    out["warmup"] = [chat(pipeline, model, f"{rid}-warm{i}", "Say hello.") for i in range(2)]
    out["short"] = [chat(pipeline, model, f"{rid}-short{i}", f"Count to {i + 3}.") for i in range(10)]
    out["long"] = [chat(pipeline, model, f"{rid}-long{i}", f"{LONG_PROMPT} Summarise item {i}.") for i in range(10)]
    concurrent: list[dict] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        for j in range(3):
            answer = chat(pipeline, model, f"{rid}-conc{index}x{j}", f"{LONG_PROMPT[: 800 + 50 * j]} Go {index}.")
            with lock:
                concurrent.append(answer)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["concurrent4_wall_s"] = round(time.monotonic() - started, 2)
    out["concurrent4"] = concurrent
    status, body = http("POST", pipeline["url"] + "/v1/chat/completions", key=None,
                        body={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    out["without_key"] = {"status": status, "body": body.decode(errors="replace")[:200]}
    if audio:
        # Text and speech out: the request goes on from decode through talker and code2wav.
        out["audio"] = [speech(pipeline, model, f"{rid}-audio{i}") for i in range(3)]
    if pd:
        # The prefill's single token forced to <|im_end|> (151645): vLLM frees such a prefill's KV; the
        # collection's connector sends it like a length-capped one. Must answer, not hang 480 s.
        eos = chat(pipeline, model, f"{rid}-eosfirst", "Say hello.", max_tokens=4,
                   extra={"ignore_eos": False, "logit_bias": {"151645": 100}}, timeout=120)
        out["eos_first_token"] = eos
    return out


# --- scenarios --------------------------------------------------------------------------------


def evidence(engine: Engine, pipeline: dict, results: dict, pd: bool) -> dict:
    text = engine.text()
    found: dict = {"failure_lines": [line[:300] for line in text.splitlines() if FAILURE_LINES.search(line)][:12]}
    found["pd_lines"] = sum(1 for line in text.splitlines() if _pd_evidence.PD_EVENT in line)
    if pd:
        verdicts = {}
        for group in ("short", "long", "concurrent4"):
            for answer in results.get(group, []):
                verdicts[answer["request_id"]] = _pd_evidence.judge(text, answer["request_id"])["ok"]
        found["requests_through_prefill_and_decode"] = sum(verdicts.values())
        found["requests_judged"] = len(verdicts)
        tokens = [int(m.group(1)) for m in re.finditer(r"decode received KV .* tokens=(\d+)", text)]
        found["kv_tokens_received"] = {"requests": len(tokens), "tokens": sum(tokens)}
        sample = next(iter(verdicts), None)
        if sample:
            found["example"] = _pd_evidence.judge(text, sample)
        ports = listening_ports()
        if "nixl_side_channel" in pipeline["ports"]:
            # NIXL: each engine's handshake listener at its own planned port, UCX inside its planned slice.
            side = sorted(pipeline["ports"]["nixl_side_channel"].values())
            found["nixl_side_channels_listening"] = [p for p in side if p in ports]
            low, high = pipeline["ports"]["ucx_tcp"]
            found["ucx_ports_listening"] = [p for p in ports if low <= p <= high]
            found["ucx_environment"] = {k: v for k, v in pipeline["environment"].items() if k.startswith(("UCX_", "VLLM_NIXL"))}
            found["nixl_lines"] = [line for line in text.splitlines() if "nixl" in line.lower()][:12]
        else:
            port = pipeline["ports"]["bootstrap"]
            status, body = http("GET", f"http://127.0.0.1:{port}/query", key=None, timeout=10)
            found["bootstrap_query"] = {"status": status, "body": body.decode(errors="replace")[:600]}
            low, high = pipeline["ports"]["mooncake_rpc"]
            found["mooncake_ports_listening"] = [p for p in ports if low <= p <= high]
        found["other_high_ports_listening"] = [p for p in ports if p > 10000 and not low <= p <= high][:20]
    return found


def scenario(name: str, render: Path, stock: bool, logs: Path, ready_timeout: float, quick: bool,
             sandboxed: bool = False, keep_compile_cache: bool = False) -> dict:
    plan = json.loads((render / "plan.json").read_text())
    pipeline = lay_out(render, plan)
    venv = make_venv(Path(pipeline["paths"]["venv"]))
    fresh_home(plan["paths"]["engine_home"], plan["backend"]["compile_cache"] if keep_compile_cache else None)
    connector = None if stock else install_connector(plan, venv["purelib"])
    if stock:
        use_stock_connector(Path(pipeline["paths"]["stage_config"]))
    pd = plan["layout"] == "pd"
    record: dict = {"scenario": name, "layout": plan["layout"], "stages": [s["role"] for s in pipeline["stages"]],
                    "connector": "vLLM MooncakeConnector (stock)" if stock and pd else connector,
                    "argv": pipeline["argv"], "gpus": pipeline["gpus"]}
    wrapper = None
    if sandboxed:
        record["sandbox_setup"] = prepare_sandbox(plan, pipeline)
        wrapper = sandbox_wrapper(render, plan, venv)
    record["run_as"] = "the unit's user, sandboxed (tests/device/sandbox.py)" if sandboxed else "root, no sandbox"
    engine = Engine(pipeline, name, logs, plan["paths"]["engine_home"], wrapper)
    log(f"{name}: starting {' '.join(pipeline['argv'][:4])} ({len(pipeline['stages'])} stages, {record['run_as']})")
    engine.start()
    try:
        record["ready"] = engine.wait_ready(ready_timeout)
        log(f"{name}: ready={record['ready']}")
        if sandboxed:
            report = next((line.split("[sandbox] ", 1)[1] for line in engine.text().splitlines()
                           if line.startswith("[sandbox] {")), None)
            record["sandbox"] = json.loads(report) if report else None
            log(f"{name}: sandbox {report}")
        if not record["ready"]["ready"]:
            record["evidence"] = evidence(engine, pipeline, {}, False)
            return record
        model = plan["served_model_name"]
        if quick:  # the control: one request is all it takes
            first = chat(pipeline, model, f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{name}-first", "Say hello.")
            time.sleep(5)
            second = chat(pipeline, model, f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{name}-second", "Say hello.")
            record["requests"] = {"first": first, "second": second}
            record["after"] = engine.alive()
        else:
            results = workload(pipeline, model, name, pd, audio="talker" in record["stages"])
            record["requests"] = results
            record["summary"] = {group: summary(results[group]) for group in ("short", "long", "concurrent4")}
            record["summary"]["concurrent4"]["wall_s"] = results["concurrent4_wall_s"]
            record["after"] = engine.alive()
        record["evidence"] = evidence(engine, pipeline, record["requests"], pd and not quick)
        log(f"{name}: {json.dumps(record.get('summary') or record['after'])[:400]}")
        return record
    finally:
        engine.stop()


def sandbox_wrapper(render: Path, plan: dict, venv: dict) -> list[str]:
    """tests/device/sandbox.py with the render's engine unit, checking the venv and packages are read-only."""
    (host, _unused), = plan["hosts"].items()
    return [sys.executable, str(REPO / "tests" / "device" / "sandbox.py"),
            "--unit", str(render / host / "systemd" / "vllm-omni@.service"),
            "--check-readonly", venv["venv"], "--check-readonly", str(STAGE / "site"),
            "--check-readonly", torch_site(), "--"]


def imports_only(render: Path, sandboxed: bool = False) -> int:
    """A cheap first look at a fresh machine: can the venv import the engine, Mooncake and our connector?"""
    plan = json.loads((render / "plan.json").read_text())
    pipeline = lay_out(render, plan)
    venv = make_venv(Path(pipeline["paths"]["venv"]))
    install_connector(plan, venv["purelib"])
    if PAYLOAD.exists() and "lock" in json.loads(PAYLOAD.read_text()):
        lock_versions(f"{venv['venv']}/bin/python")
    wrapper = []
    if sandboxed:  # as the unit's user in its sandbox: permissions and read-only mounts show up here, cheaply
        log(f"sandbox set-up: {prepare_sandbox(plan, pipeline)}")
        wrapper = sandbox_wrapper(render, plan, venv)
    transport = ((plan["backend"].get("kv_connector") or {}).get("transport")) or "mooncake"
    library = "import torch; from nixl._api import nixl_agent" if transport == "nixl" else "import mooncake.engine"
    # The GPU stack the engine will load (for 0.30.0, torch 2.13 and its NCCL and cuDNN carried whole): versions, and
    # one bf16 product and a convolution through cuDNN on the GPU, before a start spends minutes finding out.
    gpu = ("import torch; a = torch.ones(256, 256, device='cuda', dtype=torch.bfloat16); "
           "c = torch.nn.functional.conv2d(torch.ones(1, 3, 16, 16, device='cuda'), torch.ones(4, 3, 3, 3, device='cuda')); "
           "torch.cuda.synchronize(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', "
           "torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version(), 'product', float((a @ a)[0, 0]), "
           "'conv', float(c[0, 0, 0, 0]), torch.cuda.get_device_name(0)); ")
    code = (f"import time; t = time.time(); {'' if os.environ.get('DEVICE_TORCH_SITE') else gpu}"
            f"import vllm, vllm_omni; {library}; "
            "from vllm.entrypoints.cli.main import main; import vllm_omni_serve_kv as k; "
            "print('imports ok', vllm.__version__, vllm_omni.__version__, 'connector revision', k.REVISION, "
            "round(time.time() - t, 1), 's')")
    env = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": f"{STAGE / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           "HOME": plan["paths"]["engine_home"]}
    return subprocess.run([*wrapper, f"{venv['venv']}/bin/python", "-c", code], env=env, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="+", help="NAME=RENDER_DIR[:stock]")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--ready-timeout", type=float, default=420)
    parser.add_argument("--imports-only", action="store_true",
                        help="set up the first scenario's venv and import what its engine will, then stop")
    parser.add_argument("--keep-compile-cache", action="store_true",
                        help="a warm restart: keep the plan's compile cache from the previous start (the rest of the "
                             "engine home is emptied as before)")
    parser.add_argument("--compile-bytecode", action="store_true",
                        help="python -m compileall the staged packages and the machine's site-packages first")
    args = parser.parse_args()
    if args.imports_only:
        render, _sep, flag = args.scenarios[0].partition("=")[2].partition(":")
        return imports_only(Path(render), sandboxed=flag == "sandbox")
    out = Path(args.out)
    logs = STAGE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    results.setdefault("machine", nvidia_smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"))
    if args.compile_bytecode:
        results["compile_bytecode"] = compile_bytecode()
    for spec in args.scenarios:
        name, _sep, rest = spec.partition("=")
        render, _sep, flag = rest.partition(":")
        if "versions" not in results and PAYLOAD.exists() and "lock" in json.loads(PAYLOAD.read_text()):
            plan = json.loads((Path(render) / "plan.json").read_text())
            venv = make_venv(Path(lay_out(Path(render), plan)["paths"]["venv"]))
            results["versions"] = lock_versions(f"{venv['venv']}/bin/python")
        results[name] = scenario(name, Path(render), flag == "stock", logs, args.ready_timeout, quick=flag == "stock",
                                 sandboxed=flag == "sandbox", keep_compile_cache=args.keep_compile_cache)
        results_path.write_text(json.dumps(results, indent=1, default=str))
    pack_logs(logs, out / "logs.tar.gz")
    for problem in check_out(out):
        log(f"WARNING: {problem}")
    return 0


WHOLE_LOG_MAX_BYTES = 8 * 1024 * 1024  # a log kept whole still leaves the tar well under 16 MiB compressed


def pack_logs(logs: Path, archive_path: Path, whole: tuple[str, ...] = ()) -> None:
    """Logs come back as one file (the device tool returns a handful): the head and tail of each log, or the
    whole of those named in ``whole`` (a fault's slice, where every line of the story matters)."""
    with tarfile.open(archive_path, "w:gz") as archive:
        for path in sorted(p for p in logs.glob("*.log") if not p.name.endswith(".tail.log")):
            if path.name in whole and path.stat().st_size <= WHOLE_LOG_MAX_BYTES:
                archive.add(path, arcname=path.name)
                continue
            lines = path.read_text(errors="replace").splitlines()
            trimmed = path.with_suffix(".tail.log")
            trimmed.write_text("\n".join([*lines[:60], "... (cut) ...", *lines[-1500:]]) + "\n")
            archive.add(trimmed, arcname=trimmed.name)


# The device tool's limits on what comes back from $OUT (/work/.library/device/README.md, Limits).
OUT_MAX_FILES, OUT_MAX_DEPTH, OUT_MAX_BYTES = 8, 2, 16 * 1024 * 1024
OUT_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_out(out: Path) -> list[str]:
    """What under ``out`` would not come back: more than 8 files, deeper than 2 folders, over 16 MiB, odd names."""
    files = sorted(p for p in out.rglob("*") if p.is_file())
    problems = [f"{len(files)} files under {out}, the device tool returns {OUT_MAX_FILES}"] \
        if len(files) > OUT_MAX_FILES else []
    for path in files:
        relative = path.relative_to(out)
        if len(relative.parts) - 1 > OUT_MAX_DEPTH:
            problems.append(f"{relative}: more than {OUT_MAX_DEPTH} folders down")
        if path.stat().st_size > OUT_MAX_BYTES:
            problems.append(f"{relative}: {path.stat().st_size} bytes, over 16 MiB")
        if not all(OUT_NAME.fullmatch(part) for part in relative.parts):
            problems.append(f"{relative}: a name with characters other than letters, digits, '.', '_', '-'")
    return problems


if __name__ == "__main__":
    sys.exit(main())
