"""Build the offline payload that lets the real vLLM engine (0.26.0, or 0.30.0) run on the device machine, from the lock.

The device machine (one H200, Ubuntu 24.04, Python 3.12.3 with torch 2.11.0+cu130) has no package
index, so everything the engine needs beyond what its image already holds has to travel with the
repository checkout.  It is the collection's ``ubuntu2404`` host platform (data/platforms.yml), so the
payload is built from the very lock a deploy onto such a host installs,
data/locks/ubuntu2404/vllm-omni-0.26.0-pd.txt (``uv pip compile --generate-hashes``):

1. reads the lock: every package, its version and its allowed sha256 hashes;
2. splits it three ways: the GPU stack the device image already has (FROM_MACHINE: torch, triton, the
   nvidia-*/cuda-* wheels; gigabytes, they cannot travel), packages a text-only PD run on an H200 never
   imports (NOT_CARRIED, each with its reason), and everything else, which is carried;
3. downloads the carried ones with ``pip download --require-hashes`` from the lock's own lines (so each
   wheel is the lock's version and one of its hashes) and checks every wheel's sha256 against the lock
   again, cached ones included;
4. unpacks them into .device/build/site/ (what `pip install --no-deps --target` would give) and drops
   the big pieces an H200 text-only run never loads (REMOVE_VLLM below);
5. fetches the Debian 12 libraries Mooncake's engine.so links even for TCP into .device/build/lib/
   (and lib-fallback/, see DEB_DEVICE_PROVIDES) and checks that every library engine.so needs is
   then accounted for;
6. packs site/, lib/ and lib-fallback/ with a reproducible `tar | xz -9e` into .device/PREFIX.partN
   chunks of at most 40 MiB (a device call carries 64 MiB, the working tree included; PREFIX is
   engine.tar.xz for 0.26.0, payload-0.30.0 for 0.30.0) and writes the manifest (.device/payload.json,
   payload-0.30.0.json), copied to tests/device/ so the checksums and the lock's versions travel in the
   checkout.  On the device, pd_serving.py compares every package it does not carry with
   the lock (``versions`` in its results) and prints the ones that differ.

On the device: tests/device/unpack_payload.sh DEST PART... gives DEST/site (PYTHONPATH) and
DEST/lib (LD_LIBRARY_PATH).  Background and the first run: /work/shared/reference/gpu-staging.md and
record/gpu-evidence.md.

vLLM-Omni 0.30.0 (``--engine 0.30.0``) pins torch 2.13.0, which the image lacks: the few GPU-stack wheels its
torch needs at the lock's versions (ENGINES' ``gpu_wheels``: torch, its NCCL and cuDNN, triton, torchvision) travel
whole, hash-checked like the rest, appended to the xz in one stream that is cut into parts (``members`` in the
manifest say where each piece lies); unpack_payload.sh puts them into site/ ahead of the image's torch.

Re-running reuses the wheels, debs and the xz in .device/cache/ while their inputs are unchanged.
Usage: python3 tests/device/build_payload.py [--engine VERSION] | --check-renders DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / ".device"  # git-ignored
CACHE = DEVICE / "cache"
BUILD = DEVICE / "build"
SITE = BUILD / "site"
LIB = BUILD / "lib"
LIB_FALLBACK = BUILD / "lib-fallback"
DEBROOT = BUILD / "debs"
TRACKED = REPO / "tests" / "device"  # the manifest's tracked copy lives beside this script

# The device machine is this host platform (data/platforms.yml: CPython 3.12, glibc 2.39, x86_64).
PLATFORM = "ubuntu2404"
LOCKS = REPO / "data" / "locks" / PLATFORM
PYTHON_VERSION = "3.12"
GLIBC_MINOR = 39  # manylinux_2_39 and every older tag load there
# Fixed mtime inside the tar so identical inputs give a byte-identical payload (and a cache hit).
TAR_MTIME = "@" + str(int(dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc).timestamp()))

# Lock packages the run takes from the device image instead of carrying: the CUDA/torch stack,
# gigabytes of wheels that a 64 MiB call cannot carry (torch alone is ~900 MiB).  pd_serving.py compares
# the machine's version of each with the lock's and records the differences.
FROM_MACHINE = re.compile(r"torch|torchaudio|torchvision|triton|nvidia-.*|cuda-.*")

# Lock packages not carried although the device lacks them or has another version: a text-only
# Qwen3-Omni PD run on an H200 in eager mode never imports them (the first run, gpu-staging.md, served
# without them), and most are large.  Each with the reason; pd_serving.py reports what the venv then
# finds for each (the machine's copy, or nothing).
NOT_CARRIED = {
    "flashinfer-python": "FlashInfer kernels; the run sets VLLM_USE_FLASHINFER_SAMPLER=0 and uses FA3 attention",
    "fa3-fwd": "an alternative FA3 build; vLLM's own _vllm_fa3_C is carried",
    "quack-kernels": "CuTe-DSL kernels (FlashInfer/Blackwell paths)",
    "humming-kernels": "optional kernels, not selected for this model",
    "tilelang": "DSL kernels for other models (DeepSeek MLA); 70+ MiB",
    "tokenspeed-mla": "MLA kernels for other models",
    "tokenspeed-triton": "a second Triton build for tokenspeed-mla",
    "z3-solver": "tilelang's solver",
    "pynvvideocodec": "NVIDIA video decoding for video input; text only here",
    "torchcodec": "video/audio decoding for multimodal input; text only here",
    "av": "PyAV media decoding for multimodal input; text only here",
    "imageio-ffmpeg": "an ffmpeg binary (30 MiB) for video input; text only here",
    "opencv-python-headless": "image/video preprocessing; text only here (60 MiB)",
    "opencv-python": "the same with GUI libraries (0.30's lock; 74 MB); text only here, and the image has cv2 anyway",
    "openai-whisper": "built from source only (the lock's 'from source'); speech input, not used",
    "cache-dit": "diffusion-stage caching; no diffusion stage here",
    "x-transformers": "diffusion/talker helpers; no such stage here",
    "torchsde": "diffusion samplers; no diffusion stage here",
    "scipy": "audio resampling for audio input/output; text only here (35 MiB)",
    "numba": "vLLM's n-gram speculative decoding only; not enabled",
    "llvmlite": "numba's compiler",
    "onnxruntime": "audio models' ONNX parts; text only here",
    "sentry-sdk": "error reporting, off",
    "fastapi-cloud-cli": "the fastapi CLI's cloud commands",
    "fastapi-cli": "the fastapi command line",
    "supervisor": "process supervisor for other deployments",
    "mcp": "tool-server protocol, not used",
    "mcp-types": "tool-server protocol, not used",
    "anthropic": "the Anthropic-compatible API's client types, not used",
    "gguf": "GGUF checkpoints; this model is safetensors/dummy",
}

# The packages the first run (gpu-staging.md, record/gpu-evidence.md section 1) proved a text-only PD run
# imports.  They must be among the carried ones: a NOT_CARRIED entry that names one is a mistake.
PROVEN_NEEDED = (
    "vllm", "vllm-omni", "mooncake-transfer-engine-cuda13", "blake3", "setproctitle",
    "pydantic", "pydantic-core", "pydantic-settings", "pydantic-extra-types", "typing-inspection", "annotated-types",
    "python-dotenv", "cbor2", "pyzmq", "openai", "openai-harmony", "httpx2", "sniffio", "msgspec", "pybase64",
    "cachetools", "llguidance", "xgrammar", "apache-tvm-ffi", "loguru", "fastapi", "starlette", "uvicorn",
    "watchfiles", "python-multipart", "omegaconf", "prettytable", "soundfile", "cffi", "partial-json-parser",
    "model-hosting-container-standards", "jmespath", "diffusers", "janus", "mistral-common",
    "jsonschema", "referencing", "rpds-py", "jsonschema-specifications", "pycountry", "ijson", "aenum",
    "prometheus-fastapi-instrumentator", "wcwidth",
)  # fmt: skip

# Paths in the vllm wheel (relative to site/) that a text-only run on Hopper never loads; the same in 0.26.0's
# and 0.30.0's wheels.  A listed path that is absent fails the build: the wheel changed and the list must be
# re-checked.
REMOVE_VLLM = {
    # FA2 kernels (291 MiB).  Hopper runs FlashAttention 3 (_vllm_fa3_C, kept); flash_attn_interface.py
    # treats a missing FA2 module as FA2_AVAILABLE = False.
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "FlashAttention 2 kernels; sm_90 uses FA3",
    # Rust frontend binary, started only with VLLM_USE_RUST_FRONTEND=1 (vllm/envs.py).
    "vllm/vllm-rs": "Rust API frontend, used only with VLLM_USE_RUST_FRONTEND=1",
    # Vendored DeepGEMM: FP8 block-scaled GEMM/MoE (JIT headers + one extension per CPython).  A bf16
    # model never selects it and vllm.utils.import_utils.has_deep_gemm() then returns False.
    "vllm/third_party/deep_gemm": "DeepGEMM FP8 kernels; the bf16 model never selects them",
    # Blackwell-only sparse FMHA, imported lazily by the MiniMax-M3 model alone.
    "vllm/third_party/fmha_sm100": "sm_100 (Blackwell) sparse FMHA used only by MiniMax-M3",
    # NIXL's expert-parallel kernels (one 31 MiB extension per torch 2.12, 2.13, 2.14): vLLM imports nixl_ep only
    # for its NIXL all-to-all MoE backend, and the run never selects that backend. The KV connector uses nixl._api.
    "nixl_ep_cu13": "NIXL expert-parallel all-to-all kernels; KV transfer uses nixl._api only",
}

# The engines the payload can be built for.  lock: the PD lock a deploy onto an ubuntu2404 host installs;
# extra_locks: the same engine's lock for the other KV connector (vllm_omni_kv_connector: nixl), made with the
# same versions, so it differs only by its transfer library (its extra packages travel too, and a NIXL render
# installs exactly that lock); remove: REMOVE for that vllm wheel; gpu_wheels: FROM_MACHINE packages carried
# whole because the lock's torch is not the image's (each with the reason); needed: NOT_CARRIED packages that
# engine imports all the same (carried, with the reason); prefix: the parts' names.
ENGINES = {
    "0.26.0": {"lock": "vllm-omni-0.26.0-pd", "extra_locks": ("vllm-omni-0.26.0-pd-nixl",), "remove": REMOVE_VLLM,
               "gpu_wheels": {}, "needed": {}, "prefix": "engine.tar.xz", "manifest": "payload.json"},
    "0.30.0": {
        "lock": "vllm-omni-0.30.0-pd", "extra_locks": ("vllm-omni-0.30.0-pd-nixl",), "remove": REMOVE_VLLM,
        "gpu_wheels": {
            "torch": "vLLM 0.30.0 pins torch 2.13.0; the image has 2.11.0",
            "nvidia-nccl-cu13": "torch 2.13 links ncclCommResume, which the image's NCCL 2.28.9 lacks",
            "nvidia-cudnn-cu13": "torch 2.13 refuses the image's cuDNN 9.19 (compiled against 9.20)",
            "triton": "torch 2.13's Triton (3.7.1); the image has 3.6.0",
            "torchvision": "built against torch 2.13 (0.28.0); the image's 0.26.0 is torch 2.11's",
        },
        # NOT_CARRIED packages this engine imports even for text out, carried after all.
        "needed": {"av": "vLLM-Omni 0.30's API server imports it (serving_video -> diffusion media utils): "
                         "the first start on an H100 stopped at 'No module named av' (run 17)"},
        "prefix": "payload-0.30.0", "manifest": "payload-0.30.0.json",
    },
}
DEFAULT_ENGINE = "0.26.0"

# Debian 12 packages whose libraries Mooncake's engine.so links (libibverbs.so.1, libnuma.so.1,
# libcurl.so.4, and since Mooncake 0.3.14 libmlx5.so.1 from ibverbs-providers); their library
# dependencies are followed with apt-cache.
DEB_ROOTS = ("libibverbs1", "libnuma1", "libcurl4", "ibverbs-providers")
# glibc, libgcc and libstdc++ come from Ubuntu 24.04 itself and must not be shadowed by Debian's.
DEB_NEVER = {"libc6", "libgcc-s1", "libstdc++6"}
# Libraries of the closure that Ubuntu 24.04 normally has under the same soname, mostly newer (gnutls
# 3.8, gmp 6.3, zlib 1.3 there; 3.7, 6.2, 1.2.13 here); the closure without them is exactly the 15 debs
# gpu-staging.md reports.  LD_LIBRARY_PATH would put Debian's copy ahead of Ubuntu's for the engine and
# for every compiler it spawns (Triton's gcc links gmp), so they go to lib-fallback/ and
# unpack_payload.sh links one into lib/ only when the device's ldconfig does not know the soname.
DEB_DEVICE_PROVIDES = {
    "zlib1g", "libzstd1", "libssl3", "libffi8",  # python3.12 and dpkg depend on these
    "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libcom-err2", "libkeyutils1",
    "libgnutls30", "libgmp10", "libhogweed6", "libnettle8", "libp11-kit0", "libtasn1-6", "libdb5.3",
}  # fmt: skip
# Sonames the device supplies to engine.so no matter what the payload carries: glibc, the GCC runtime,
# liblzma (dpkg, which is essential, links it), the NVIDIA driver (libcuda) and torch's
# nvidia-cuda-runtime wheel (libcudart, loaded before Mooncake is imported).
DEVICE_SONAMES = re.compile(
    r"(libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so\.\d+|ld-linux-x86-64\.so\.2"
    r"|libstdc\+\+\.so\.6|libgcc_s\.so\.1|liblzma\.so\.5|libcuda\.so\.1|libcudart\.so\.13"
)

# A device call carries 64 MiB in all, the working tree included: about 20 MiB since data/locks holds
# 0.30's PD locks too (2026-12-06; 11 MiB before), plus 2.6 MiB of extras with the last part.  40 MiB leaves room.
PART_BYTES = 40 * 1024 * 1024  # 41,943,040


def log(msg: str) -> None:
    print(f"[build_payload] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("text", True)
    return subprocess.run(cmd, check=True, **kw)


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- 1. the lock


def parse_lock(path: Path) -> dict[str, dict]:
    """{name: {"version", "hashes", "lines"}} of a `uv pip compile --generate-hashes` output."""
    packages: dict[str, dict] = {}
    current = None
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+?)(\s*;[^\\]*)?\s*\\?$", line)
        if m:
            current = canon(m.group(1))
            if m.group(3):
                sys.exit(f"{path}: {current} has an environment marker; this builder does not evaluate markers")
            packages[current] = {"version": m.group(2), "hashes": [], "lines": [line]}
            continue
        h = re.match(r"^\s+--hash=sha256:([0-9a-f]{64})\s*\\?$", line)
        if not (h and current):
            sys.exit(f"{path}: unexpected line {line!r}")
        packages[current]["hashes"].append(h.group(1))
        packages[current]["lines"].append(line)
    for name, entry in packages.items():
        if not entry["hashes"]:
            sys.exit(f"{path}: {name} has no hash")
        entry["lines"][-1] = entry["lines"][-1].rstrip().removesuffix("\\").rstrip()
    return packages


def from_source(path: Path) -> set[str]:
    """The lock header's '# from source:' names (sdists: no wheel to carry)."""
    for line in path.read_text().splitlines()[:6]:
        if line.startswith("# from source:"):
            return {canon(item.split("==")[0]) for item in line.split(":", 1)[1].split()}
    return set()


def split_lock(lock: dict[str, dict], sdists: set[str], gpu_wheels: dict[str, str],
               needed: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(carried, from the machine, not carried) names, each sorted; gpu_wheels are carried, though FROM_MACHINE,
    and needed ones, though NOT_CARRIED."""
    known = set().union(*(parse_lock(LOCKS / f"{e['lock']}.txt") for e in ENGINES.values()))
    stray = sorted(set(NOT_CARRIED) - known)
    if stray:
        sys.exit(f"NOT_CARRIED names packages no engine's lock has: {stray}")
    absent = sorted((set(gpu_wheels) | set(needed)) - set(lock))
    if absent:
        sys.exit(f"gpu_wheels or needed name packages the lock does not have: {absent}")
    proven = sorted(set(PROVEN_NEEDED) - set(lock))
    if proven:
        sys.exit(f"the lock lacks packages the first run needed: {proven}")
    machine = sorted(n for n in lock if FROM_MACHINE.fullmatch(n) and n not in gpu_wheels)
    skipped = sorted(n for n in lock if n in NOT_CARRIED and n not in machine and n not in needed)
    wrongly = sorted((set(machine) | set(skipped)) & set(PROVEN_NEEDED))
    if wrongly:
        sys.exit(f"not carried, though the first run needed them: {wrongly}")
    unbuildable = sorted(n for n in sdists if n in lock and n not in machine and n not in skipped)
    if unbuildable:
        sys.exit(f"built from source only (no wheel to carry): {unbuildable}; list them in NOT_CARRIED with a reason")
    carried = sorted(n for n in lock if n not in machine and n not in skipped)
    return carried, machine, skipped


# ---------------------------------------------------------------- 2. download wheels, hash-checked


def pip_platform_args() -> list[str]:
    # pip does not widen an explicit manylinux_2_N tag to older ones, so every glibc tag up to the
    # platform's 2_39 is named; manylinux2014 makes pip add the 2010/1 legacy aliases itself.
    tags = [f"manylinux_2_{n}_x86_64" for n in range(GLIBC_MINOR, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
    return [arg for tag in tags for arg in ("--platform", tag)]


def wheel_of(wheels: Path, name: str, version: str) -> list[Path]:
    found = []
    for whl in sorted(wheels.glob("*.whl")):
        parts = whl.name[:-4].split("-")
        if canon(parts[0]) == name and parts[1] == version:
            found.append(whl)
    return found


def download(lock: dict[str, dict], carried: list[str], lock_sha: str) -> dict[str, tuple[Path, str]]:
    """{name: (wheel, sha256)}: one wheel per carried package, its sha256 one of the lock's."""
    # One folder per lock: a wheel of another lock's version or tag can never be picked up.
    wheels = CACHE / f"wheels-{PLATFORM}-{lock_sha[:12]}"
    wheels.mkdir(parents=True, exist_ok=True)
    todo = [n for n in carried if not wheel_of(wheels, n, lock[n]["version"])]
    if todo:
        req = CACHE / f"carried-{lock_sha[:12]}.txt"
        # The lock's own lines (name==version and every --hash), so pip refuses any other file.
        req.write_text("".join("\n".join(lock[n]["lines"]) + "\n" for n in todo))
        log(f"pip download --require-hashes: {len(todo)} wheels")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps", "--only-binary=:all:",
             "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", "cp312", "--abi", "abi3",
             "--abi", "none", *pip_platform_args(), "--dest", str(wheels), "--disable-pip-version-check",
             "--progress-bar", "off", "--quiet", "-r", str(req)],
            stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        # This machine's pip.conf names local file:// indexes that lack most projects; pip warns per
        # project per index.  Only the other lines are worth showing.
        noise = "is ignored: it is neither a file nor a directory"
        sys.stderr.write("".join(ln for ln in proc.stderr.splitlines(keepends=True) if noise not in ln))
        if proc.returncode:
            sys.exit(f"pip download failed (rc {proc.returncode}) for some of: {' '.join(todo)}")
    found: dict[str, tuple[Path, str]] = {}
    for name in carried:
        files = wheel_of(wheels, name, lock[name]["version"])
        if len(files) != 1:
            sys.exit(f"{name}=={lock[name]['version']}: expected one wheel in {wheels}, found {[f.name for f in files]}")
        digest = sha256_file(files[0])
        if digest not in lock[name]["hashes"]:
            sys.exit(f"{files[0].name}: sha256 {digest} is not one of the lock's hashes for {name}")
        found[name] = (files[0], digest)
    return found


# ---------------------------------------------------------------- 3. install into site/


def install_wheel(whl: Path, site: Path) -> list[str]:
    """Unpack like `pip install --no-deps --target`; return the .data entries that have no place in site/."""
    dropped = []
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            rel = Path(info.filename)
            if rel.is_absolute() or ".." in rel.parts:
                sys.exit(f"{whl.name}: unsafe member {info.filename!r}")
            top = rel.parts[0]
            if top.endswith(".data"):
                # purelib/platlib belong in site/ itself; scripts, headers and data would go to bin/,
                # include/ and the prefix, which nothing imports.
                if len(rel.parts) > 2 and rel.parts[1] in ("purelib", "platlib"):
                    rel = Path(*rel.parts[2:])
                else:
                    dropped.append(info.filename)
                    continue
            dest = site / rel
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, dest.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if (info.external_attr >> 16) & 0o111:  # keep executables executable, as pip does
                dest.chmod(0o755)
    return dropped


def build_site(wheels: dict[str, tuple[Path, str]], remove: dict[str, str]) -> list[dict]:
    if SITE.exists():
        shutil.rmtree(SITE)  # a fresh tree each time, so nothing removed earlier can linger or reappear
    SITE.mkdir(parents=True)
    for name, (whl, _digest) in sorted(wheels.items()):
        dropped = install_wheel(whl, SITE)
        if dropped:
            log(f"{name}: not installed (not importable anyway): {len(dropped)} .data entries, e.g. {dropped[0]}")
    removed = []
    for rel, why in remove.items():
        path = SITE / rel
        if not path.exists():
            sys.exit(f"REMOVE lists {rel}, which the wheel no longer has: re-check REMOVE against the vllm wheel")
        size = tree_bytes(path) if path.is_dir() else path.stat().st_size
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append({"path": rel, "bytes": size, "reason": why})
    # Bytecode is rebuilt on the device for its own interpreter; carrying it only costs bytes.
    for cache_dir in sorted(SITE.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache_dir)
    for pyc in SITE.rglob("*.py[co]"):
        pyc.unlink()
    return removed


# ---------------------------------------------------------------- 4. Debian libraries


def deb_closure() -> list[str]:
    seen: list[str] = []
    queue = list(DEB_ROOTS)
    while queue:
        pkg = queue.pop(0)
        if pkg in seen:
            continue
        seen.append(pkg)
        out = run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
                   "--no-replaces", "--no-enhances", pkg], capture_output=True).stdout  # fmt: skip
        for m in re.finditer(r"^\s*\|?(?:Pre)?Depends:\s*(\S+)", out, re.M):
            dep = m.group(1)
            # Only shared-library packages (lib*, and zlib1g, which predates the naming) matter at run
            # time: adduser, debconf and <virtual> ones serve maintainer scripts we never run.
            if (dep.startswith("lib") or dep == "zlib1g") and dep not in DEB_NEVER:
                queue.append(dep)
    return seen


def fetch_debs(pkgs: list[str]) -> dict[str, Path]:
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    todo = [p for p in pkgs if not list(debs.glob(f"{p}_*.deb"))]
    if todo:
        log(f"apt-get download {' '.join(todo)}")
        try:
            run(["apt-get", "download", *todo], cwd=debs, capture_output=True)
        except subprocess.CalledProcessError:
            # Package lists may be missing or stale on a fresh machine; update once and retry.
            run(["apt-get", "update", "-qq"])
            run(["apt-get", "download", *todo], cwd=debs)
    found = {}
    for p in pkgs:
        files = sorted(debs.glob(f"{p}_*.deb"))
        if not files:
            sys.exit(f"apt-get download gave no .deb for {p}")
        found[p] = files[-1]
    return found


def elf_dynamic(path: Path) -> dict[str, list[str]]:
    out = run(["readelf", "-d", "-W", str(path)], capture_output=True).stdout
    info: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": [], "SONAME": []}
    for tag, value in re.findall(r"\((NEEDED|RPATH|RUNPATH|SONAME)\)\s+[^\[]*\[([^\]]*)\]", out):
        info[tag].append(value)
    return info


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def build_libs(debs: dict[str, Path]) -> list[dict]:
    for d in (DEBROOT, LIB, LIB_FALLBACK):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    rows = []
    for pkg, deb in debs.items():
        root = DEBROOT / pkg
        run(["dpkg", "-x", str(deb), str(root)])
        version = run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True).stdout.strip()
        fallback = pkg in DEB_DEVICE_PROVIDES
        libs = []
        # Top level of the multiarch dirs only: sub-directories hold plugins (sasl2, ...) that are
        # looked up by absolute path and never through LD_LIBRARY_PATH.
        for libdir in (root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu"):
            for f in sorted(libdir.glob("*.so*")) if libdir.is_dir() else []:
                if fallback:
                    # One real file per soname, so the device script can test each name with ldconfig.
                    if f.is_symlink() or not is_elf(f):
                        continue
                    for soname in elf_dynamic(f)["SONAME"] or [f.name]:
                        shutil.copy2(f, LIB_FALLBACK / soname)
                        libs.append(soname)
                else:
                    shutil.copy2(f, LIB / f.name, follow_symlinks=False)
                    libs.append(f.name)
        rows.append({"package": pkg, "version": version, "deb": deb.name,
                     "into": "lib-fallback" if fallback else "lib", "files": libs})  # fmt: skip
    return rows


def check_engine_libs() -> None:
    """Follow NEEDED from Mooncake's engine.so and fail on any library the device would not find."""
    engines = sorted(SITE.glob("mooncake/engine*.so"))
    if not engines:
        sys.exit("mooncake/engine.so not found in site/")
    # (file, DT_RPATH dirs of the objects that loaded it): ld.so also searches the loaders' DT_RPATH
    # (not DT_RUNPATH), which is how auditwheel's .libs/ find each other from engine.so.
    todo: list[tuple[Path, tuple[Path, ...]]] = [(e, ()) for e in engines]
    todo += [(p, ()) for p in sorted(LIB.iterdir()) if not p.is_symlink()]
    seen: set[Path] = set()
    missing, from_device, via_fallback = set(), set(), set()
    while todo:
        elf, inherited = todo.pop()
        if elf in seen:
            continue
        seen.add(elf)
        dyn = elf_dynamic(elf)

        def dirs_of(entries: list[str], elf: Path = elf) -> tuple[Path, ...]:
            return tuple(Path(d.replace("$ORIGIN", str(elf.parent))) for e in entries for d in e.split(":") if d)

        rpath = () if dyn["RUNPATH"] else dirs_of(dyn["RPATH"])
        search = (*rpath, *inherited, *dirs_of(dyn["RUNPATH"]), LIB)
        for needed in dyn["NEEDED"]:
            hit = next((d / needed for d in search if (d / needed).exists()), None)
            if hit:
                todo.append((hit.resolve(), (*rpath, *inherited)))
            elif DEVICE_SONAMES.fullmatch(needed):
                from_device.add(needed)
            elif (LIB_FALLBACK / needed).exists():
                via_fallback.add(needed)
                todo.append((LIB_FALLBACK / needed, ()))
            else:
                missing.add(f"{needed} (needed by {elf.name})")
    log(f"engine.so check: {len(seen)} ELF files followed; from the device: {', '.join(sorted(from_device))}")
    log(f"  from the device's Ubuntu, else lib-fallback/: {', '.join(sorted(via_fallback)) or '-'}")
    if missing:
        sys.exit("libraries nobody provides: " + "; ".join(sorted(missing)))


# ---------------------------------------------------------------- 5. pack


def pack(prefix: str) -> tuple[int, str, Path]:
    tar = CACHE / f"{prefix}.tar"
    xz = CACHE / ("engine.tar.xz" if prefix == "engine.tar.xz" else f"{prefix}.engine.tar.xz")
    stamp = xz.with_name(xz.name + ".source-sha256")
    # Sorted names, fixed owner and mtime: the same tree gives the same bytes, so an unchanged build
    # skips the ~10 min of xz -9e below and the parts keep their checksums.
    run(["tar", "-C", str(BUILD), "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
         f"--mtime={TAR_MTIME}", "-cf", str(tar), "site", "lib", "lib-fallback"])  # fmt: skip
    tar_bytes, tar_sha = tar.stat().st_size, sha256_file(tar)
    if xz.exists() and stamp.exists() and stamp.read_text() == tar_sha:
        log("xz cached: the tar is unchanged")
    else:
        log(f"xz -9e -T2 of {mib(tar_bytes)} (several minutes)")
        tmp = xz.with_suffix(".xz.tmp")
        with tar.open("rb") as src, tmp.open("wb") as dst:
            run(["xz", "-9e", "-T2", "-c"], stdin=src, stdout=dst, text=False)
        tmp.replace(xz)
        stamp.write_text(tar_sha)
    tar.unlink()
    return tar_bytes, tar_sha, xz


def split(prefix: str, pieces: list[Path]) -> tuple[list[dict], list[dict]]:
    """Cut the pieces, end to end, into PART_BYTES parts: (members, parts).

    One stream rather than parts per piece: a call carries one part, and a piece's last part would travel
    half empty.  members: each piece's name, offset in the stream, bytes and sha256 (unpack_payload.sh cuts
    them out again).  With one piece (0.26.0) the parts are the xz's own, as before.
    """
    for old in DEVICE.glob(f"{prefix}.part*"):
        old.unlink()
    members, parts, offset = [], [], 0
    buffer = bytearray()

    def flush(final: bool) -> None:
        while len(buffer) >= PART_BYTES or (final and buffer):
            chunk = bytes(buffer[:PART_BYTES])
            del buffer[:PART_BYTES]
            path = DEVICE / f"{prefix}.part{len(parts)}"
            path.write_bytes(chunk)
            parts.append({"name": path.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})

    for piece in pieces:
        size = piece.stat().st_size
        members.append({"name": piece.name.removeprefix(f"{prefix}."), "offset": offset, "bytes": size,
                        "sha256": sha256_file(piece)})
        offset += size
        with piece.open("rb") as src:
            while chunk := src.read(PART_BYTES):
                buffer.extend(chunk)
                flush(final=False)
    flush(final=True)
    return members, parts


# ---------------------------------------------------------------- main


def check_renders(root: Path) -> None:
    """Each render under root must plan the device host on PLATFORM with the very lock its engine's payload holds."""
    plans = sorted(root.glob("*/plan.json"))
    if not plans:
        sys.exit(f"no plan.json under {root}")
    for plan_path in plans:
        plan = json.loads(plan_path.read_text())
        platforms = set(plan["host_platforms"].values())
        if platforms != {PLATFORM}:
            sys.exit(f"{plan_path}: host platforms {plan['host_platforms']}, not {PLATFORM}: the payload would not be "
                     "what this render installs (set vllm_omni_host_platform in the device inventory)")
        version = plan["engine"]["vllm_omni_version"]
        if version not in ENGINES:
            sys.exit(f"{plan_path}: vLLM-Omni {version}: no payload is built for it (ENGINES: {sorted(ENGINES)})")
        manifest = json.loads((TRACKED / ENGINES[version]["manifest"]).read_text())
        held = {Path(manifest["lock"]["path"]).stem: manifest["lock"]["sha256"],
                **{Path(e["path"]).stem: e["sha256"] for e in manifest.get("extra_locks", [])}}
        engine_lock = plan["backend"]["lock"]
        entry = plan["locks"].get(PLATFORM, {}).get(engine_lock)
        if engine_lock.startswith("vllm-omni-") and engine_lock in held and entry and entry["sha256"] != held[engine_lock]:
            sys.exit(f"{plan_path}: the plan's {engine_lock} lock {entry['sha256']} is not the payload's {held[engine_lock]}")
        # The aggregated lock (vllm-omni-VERSION) is the PD lock's versions without the transport library.
        if engine_lock.startswith("vllm-omni-") and engine_lock not in held and engine_lock != f"vllm-omni-{version}":
            sys.exit(f"{plan_path}: the plan installs {engine_lock}, which the payload was not built from ({sorted(held)})")
        log(f"{plan_path.parent.name}: {PLATFORM}, {engine_lock} "
            + ("= the payload's lock" if engine_lock in held else "(its packages are the payload's, less the transport)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=sorted(ENGINES), default=DEFAULT_ENGINE, help="the vLLM-Omni version to carry")
    ap.add_argument("--check-renders", type=Path, metavar="DIR",
                    help="only check that every DIR/*/plan.json installs the payload's lock on this platform")
    args = ap.parse_args()
    if args.check_renders:
        check_renders(args.check_renders)
        return
    os.nice(10)  # this machine is shared; every child (pip, xz) inherits it
    started = time.monotonic()
    engine = ENGINES[args.engine]

    lock_path = LOCKS / f"{engine['lock']}.txt"
    lock = parse_lock(lock_path)
    lock_sha = sha256_file(lock_path)
    extra_locks = []
    for extra_path in (LOCKS / f"{name}.txt" for name in engine["extra_locks"]):
        extra = parse_lock(extra_path)
        differ = sorted(n for n in set(extra) & set(lock) if extra[n]["version"] != lock[n]["version"])
        if differ:
            sys.exit(f"{extra_path.relative_to(REPO)} differs from {lock_path.relative_to(REPO)} in {differ}: "
                     "one site/ cannot hold both (make the locks agree: scripts/lock.py constrains them)")
        added = sorted(set(extra) - set(lock))
        lock.update({n: extra[n] for n in added})
        extra_locks.append({"path": str(extra_path.relative_to(REPO)), "sha256": sha256_file(extra_path),
                            "adds": added})
        log(f"{extra_path.relative_to(REPO)}: the same versions, plus {', '.join(added)}")
    # The wheel folder follows every lock that feeds it.
    lock_sha_all = hashlib.sha256("".join([lock_sha, *(e["sha256"] for e in extra_locks)]).encode()).hexdigest()
    carried, machine, skipped = split_lock(lock, from_source(lock_path), engine["gpu_wheels"], engine["needed"])
    log(f"lock {lock_path.relative_to(REPO)}: {len(lock)} packages; carrying {len(carried)} "
        f"({len(engine['gpu_wheels'])} of them whole: {', '.join(sorted(engine['gpu_wheels'])) or '-'}), "
        f"{len(machine)} from the device image, {len(skipped)} not carried")
    all_wheels = download(lock, carried, lock_sha_all if extra_locks else lock_sha)
    log(f"{len(all_wheels)} wheels, each the lock's version with a sha256 the lock lists")
    whole = {n: all_wheels[n] for n in sorted(engine["gpu_wheels"])}
    wheels = {n: w for n, w in all_wheels.items() if n not in whole}
    removed = build_site(wheels, engine["remove"])
    for r in removed:
        log(f"removed {r['path']} ({mib(r['bytes'])}): {r['reason']}")

    closure = deb_closure()
    debs = fetch_debs(closure)
    deb_rows = build_libs(debs)
    log(f"debs: {len(deb_rows)} ({sum(r['into'] == 'lib' for r in deb_rows)} into lib/, rest into lib-fallback/)")
    check_engine_libs()

    sizes = {"site_bytes": tree_bytes(SITE), "lib_bytes": tree_bytes(LIB), "lib_fallback_bytes": tree_bytes(LIB_FALLBACK)}
    tar_bytes, tar_sha, xz = pack(engine["prefix"])
    members, parts = split(engine["prefix"], [xz, *(w for w, _digest in whole.values())])
    sizes.update(tar_bytes=tar_bytes, xz_bytes=xz.stat().st_size,
                 whole_wheel_bytes=sum(w.stat().st_size for w, _digest in whole.values()))

    packages = [{"name": n, "version": lock[n]["version"], "wheel": w.name, "wheel_bytes": w.stat().st_size,
                 "sha256": digest} for n, (w, digest) in sorted(all_wheels.items())]
    manifest = {
        "built": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "build_seconds": round(time.monotonic() - started),
        "builder": "tests/device/build_payload.py",
        "lock": {"path": str(lock_path.relative_to(REPO)), "sha256": lock_sha, "platform": PLATFORM,
                 "packages": len(lock),
                 "hash_checked": "pip download --require-hashes, then sha256 of each wheel against the lock's hashes"},
        "extra_locks": extra_locks,
        "target": {"python": PYTHON_VERSION, "glibc": f"2.{GLIBC_MINOR}", "machine": "x86_64"},
        "packages": packages,
        "from_machine": [{"name": n, "version": lock[n]["version"]} for n in machine],
        "not_carried": [{"name": n, "version": lock[n]["version"], "why": NOT_CARRIED[n]} for n in skipped],
        "needed": [{"name": n, "version": lock[n]["version"], "why": why} for n, why in sorted(engine["needed"].items())],
        "whole_wheels": [{"name": n, "version": lock[n]["version"], "wheel": w.name, "why": engine["gpu_wheels"][n]}
                         for n, (w, _digest) in whole.items()],
        "removed": removed,
        "debs": deb_rows,
        "sizes": sizes,
        "tar_sha256": tar_sha,
        "members": members,
        "parts": parts,
        "device_env": {"PYTHONPATH": "DEST/site", "LD_LIBRARY_PATH": "DEST/lib", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "unpack": "tests/device/unpack_payload.sh DEST PART0 PART1 ...",
    }
    text = json.dumps(manifest, indent=2) + "\n"
    (DEVICE / engine["manifest"]).write_text(text)
    (TRACKED / engine["manifest"]).write_text(text)

    print()
    print(f"packages: {len(carried)} of the lock's {len(lock)} carried; site/ {mib(sizes['site_bytes'])}, "
          f"lib/ {mib(sizes['lib_bytes'])}, lib-fallback/ {mib(sizes['lib_fallback_bytes'])}")  # fmt: skip
    print(f"tar {mib(tar_bytes)} -> xz {mib(sizes['xz_bytes'])} ({sizes['xz_bytes']:,} bytes), "
          f"whole wheels {mib(sizes['whole_wheel_bytes'])}: {len(parts)} parts:")
    for p in parts:
        print(f"  .device/{p['name']}  {p['bytes']:>11,}  {p['sha256']}")
    print(f"manifest: .device/{engine['manifest']} (copy: tests/device/{engine['manifest']}); {manifest['build_seconds']} s")


if __name__ == "__main__":
    main()
