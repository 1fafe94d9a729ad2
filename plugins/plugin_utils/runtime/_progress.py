# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Progress of a long step on a host, as one line for the play's output (the artifact_pull and
health_wait actions).

A pull's progress file holds what ``artifact.py`` says it is doing (checking files) and then rsync's
``--info=progress2`` output: carriage-return separated lines of bytes so far, percent, rate, and
time left. Only the newest line counts.

An engine's start is read from its journal: vLLM prints a milestone line at each step (weights,
compilation, KV cache, CUDA graphs, API server), so the newest milestone says what it is doing.
"""

from __future__ import annotations

import re

RSYNC_PROGRESS = re.compile(r"([\d,]+)\s+(\d+)%\s+(\S+/s)\s+(\d+:\d{2}:\d{2})")


def latest(text: str) -> str:
    """The newest non-empty line of a progress file (rsync rewrites its line with carriage returns)."""
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    return lines[-1] if lines else ""


def progress_line(host: str, artifact: str, text: str, total_bytes: int | None, elapsed: float) -> str | None:
    """``host: artifact: 1.20 of 3.22 GB (37%), 310.52MB/s, 0:00:06 left`` or what the script says it
    is doing; None when the file says nothing yet."""
    line = latest(text)
    if not line:
        return None
    matches = list(RSYNC_PROGRESS.finditer(line))
    if not matches:
        return f"{host}: {artifact}: {line} ({elapsed:.0f} s)"
    found = matches[-1]
    done = int(found.group(1).replace(",", ""))
    of = f" of {total_bytes / 1e9:.2f}" if total_bytes else ""
    return f"{host}: {artifact}: {done / 1e9:.2f}{of} GB ({found.group(2)}%), {found.group(3)}, {found.group(4)} left"


# vLLM's start-up milestones, in the order they appear (vLLM's own log lines; checked against a real
# vLLM 0.26.0 + vLLM-Omni 0.26.0 PD start on an H200, tests/fixtures/device-h200-startup/). The newest
# line that matches one says what the engine is doing; a percentage on it (tqdm) is kept. Not
# milestones: "Application startup complete" and "Uvicorn running" (a PD prefill stage's Mooncake
# bootstrap server prints them long before the API server), "disabling torch.compile" (eager mode).
ENGINE_PHASES = (
    (re.compile(r"\.safetensors.*\d+%|Downloading|Fetching \d+ files"), "downloading weights (not staged)"),
    (re.compile(r"Starting to load model|Loading safetensors checkpoint shards|Loading weights"), "loading weights"),
    (re.compile(r"Loading weights took|Model loading took"), "weights loaded, profiling memory"),
    (re.compile(r"Dynamo bytecode transform|Compiling a graph|Cache the graph of compile range|saved AOT compiled"),
     "compiling (torch.compile)"),
    (re.compile(r"torch\.compile (?:takes|took) .* in total|Initial profiling/warmup run"), "compiled, profiling memory"),
    (re.compile(r"Available KV cache memory|GPU KV cache size|Maximum concurrency for"), "allocating the KV cache"),
    (re.compile(r"Mooncake Bootstrap Server started|Registering KV_Caches|Initializing Mooncake Transfer Engine worker"),
     "setting up the KV transfer (Mooncake)"),
    (re.compile(r"Capturing CUDA graphs?(?: \(([^)]+)\))?"), "capturing CUDA graphs"),
    (re.compile(r"Graph capturing finished|init engine \(profile, create kv cache"), "engine initialised"),
    (re.compile(r"Starting vLLM API server"), "API server starting"),
)
COUNTED = ("loading weights", "capturing CUDA graphs", "downloading weights (not staged)")
PERCENT = re.compile(r"(\d{1,3})%")
STAGE = re.compile(r"^\W*\(\w*?stage(\d+)")  # vLLM-Omni's process tag: (StageEngineCoreProc_stage1_replica0 pid=948)
LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s*)?(?:(?:INFO|WARNING|ERROR|DEBUG)\s+\d\d-\d\d \S+ \[[^\]]+\]\s*)?")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def engine_phase(lines: list[str]) -> str | None:
    """What the journal's newest milestone says the engine is doing (``loading weights (40%)``; with
    ``stage N:`` in front when a vLLM-Omni stage process printed it), or None when no line is one of
    vLLM's milestones (a stand-in, or the process has just started)."""
    for line in reversed(lines):
        # A tqdm bar is one journal line of carriage-return separated updates behind one process tag:
        # the tag is at the front, the newest update at the back.
        segments = ANSI.sub("", line).split("\r")
        stage = STAGE.search(segments[0])
        for text in reversed(segments):
            for pattern, phase in reversed(ENGINE_PHASES):
                found = pattern.search(text)
                if found:
                    percent = PERCENT.search(text) if phase in COUNTED else None
                    # vLLM captures in passes, "(mixed prefill-decode, PIECEWISE)" then "(decode, FULL)": name it.
                    label = f"{found.group(1)}: " if found.lastindex else ""
                    return (f"stage {stage.group(1)}: " if stage else "") + (
                        f"{phase} ({label}{percent.group(1)}%)" if percent else phase)
    return None


def start_progress(journal: list[str]) -> str:
    """What a starting engine has got to, for telling a stalled start from a slow one: its newest milestone with
    its percentage, or before its first milestone its newest line (a stand-in, the imports before weights load)."""
    return engine_phase(journal) or (plain_log_line(journal[-1]) if journal else "")


def stall_message(host: str, target: dict, stalled: float, stall_timeout: int) -> str:
    """One target that made no progress for ``stalled`` seconds: the phase (and stage) it is stuck in, its newest
    line, what to do."""
    journal = target["journal"]
    phase = engine_phase(journal) or "before vLLM's first start-up milestone"
    newest = plain_log_line(journal[-1], width=300) if journal else "no journal lines"
    return (f"{host}/{target['name']} ({target['unit']}) made no progress for {stalled:.0f} s (bound "
            f"{stall_timeout} s, vllm_omni_start_stall_timeout), stuck at: {phase}; its newest line: {newest}. "
            f"It still does not answer {target['url']} ({target['problem']}). The unit is left as it is for a look "
            f"(journalctl -u {target['unit']}; py-spy dump --pid of its main process); fix the cause (a peer it "
            "waits for, a Mooncake bootstrap address it cannot reach), then deploy again or restart the unit. "
            "A start slower than the bound, not stuck: raise vllm_omni_start_stall_timeout.")


def plain_log_line(line: str, width: int = 140) -> str:
    """A journal line without colour codes, process tag, level and source location, cut to ``width``."""
    newest = [segment for segment in ANSI.sub("", line).split("\r") if segment.strip()]  # a tqdm bar: its newest update
    plain = newest[-1].strip() if newest else ""
    text = LOG_PREFIX.sub("", plain, count=1).strip() or plain
    return text if len(text) <= width else text[: width - 3] + "..."


def pause_before_next_look(elapsed: float, delay: float, timeout: float) -> float:
    """Seconds to sleep before the next health look: 1 s at first, growing with the time already waited up to
    ``delay``, never past the timeout. A restarted engine that is up in two seconds is seen then, not after a
    whole ``delay`` (the simulator and the router answer in 1-3 s; a real engine's load takes minutes, where
    looking every ``delay`` seconds is plenty)."""
    return max(0.0, min(float(delay), max(1.0, elapsed / 4), timeout - elapsed))


def health_wait_line(host: str, name: str, elapsed: float, timeout: int, status: str, journal: list[str]) -> str:
    """``lab-1/omni0: 45 s of 1800, http://10.0.0.5:8091/health: connection refused; loading weights (50%): <newest line>``."""
    phase = engine_phase(journal)
    newest = plain_log_line(journal[-1]) if journal else "no journal lines yet"
    doing = f"{phase}: {newest}" if phase else newest
    return f"{host}/{name}: {elapsed:.0f} s of {timeout}, {status}; {doing}"


def venv_line(host: str, venv: str, notes: str, written: int | None, elapsed: float) -> str | None:
    """``lab-1: /opt/.../venv: installing 182 locked packages: 2.31 of 8.02 GB (29%), 95.1 MB/s, 0:01:00 left``
    from build-venv.sh's notes ("expect BYTES", then each step) and the bytes the new venv holds so far;
    None before the script has said anything."""
    lines = [line.strip() for line in notes.splitlines() if line.strip()]
    expected = next((int(line.split()[1]) for line in lines if line.startswith("expect ") and line.split()[1].isdigit()),
                    None)
    steps = [line for line in lines if not line.startswith("expect ")]
    if not steps:
        return None
    step = steps[-1]
    if not step.startswith("installing") or not written:
        return f"{host}: {venv}: {step} ({elapsed:.0f} s)"
    rate = written / elapsed if elapsed > 0 else 0.0
    done = f"{written / 1e9:.2f}"
    if expected:
        share = min(written / expected, 1.0)
        left = max(expected - written, 0) / rate if rate else 0
        hours, rest = divmod(int(left), 3600)
        return (f"{host}: {venv}: {step}: {done} of {expected / 1e9:.2f} GB ({share:.0%}), {rate / 1e6:.1f} MB/s, "
                f"{hours}:{rest // 60:02d}:{rest % 60:02d} left")
    return f"{host}: {venv}: {step}: {done} GB written, {rate / 1e6:.1f} MB/s ({elapsed:.0f} s)"
