"""Build the offline payload that lets the real vLLM 0.26.0 engine run on the device machine.

The device machine (one H200, Ubuntu 24.04, Python 3.12.3 with torch 2.11.0+cu130) has no package
index, so everything the engine needs beyond what its image already holds has to travel with the
repository checkout.  This script builds that payload here, on a networked machine:

1. resolves vllm==0.26.0, vllm-omni==0.26.0 and mooncake-transfer-engine-cuda13==0.3.11.post1 for
   CPython 3.12 / manylinux_2_35 x86_64 with uv, pinned to what the device already has, so that no
   torch/nvidia wheel is ever chosen or downloaded;
2. downloads only the packages a text-only PD run was shown to need (KEEP below);
3. unpacks them into .device/build/site/ (what `pip install --no-deps --target` would give) and drops
   the big pieces an H200 text-only run never loads (REMOVE below);
4. fetches the Debian 12 libraries Mooncake's engine.so links even for TCP into .device/build/lib/
   (and lib-fallback/, see DEB_DEVICE_PROVIDES) and checks that every library engine.so needs is
   then accounted for;
5. packs site/, lib/ and lib-fallback/ with a reproducible `tar | xz -9e` into .device/engine.tar.xz.partN chunks of at most
   56 MiB (a device call carries 64 MiB, the working tree included) and writes .device/payload.json, copied to
   tests/device/payload.json so the checksums travel in the checkout.

On the device: tests/device/unpack_payload.sh DEST PART... gives DEST/site (PYTHONPATH) and
DEST/lib (LD_LIBRARY_PATH).  Background and the run that proved the package set:
/work/shared/reference/gpu-staging.md.

Re-running reuses the resolution, wheels, debs and the xz in .device/cache/ while their inputs are
unchanged; --refresh re-resolves.  Usage: python3 tests/device/build_payload.py [--refresh]
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
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
MANIFEST = DEVICE / "payload.json"
TRACKED_MANIFEST = REPO / "tests" / "device" / "payload.json"

REQUIREMENTS = ["vllm==0.26.0", "vllm-omni==0.26.0", "mooncake-transfer-engine-cuda13==0.3.11.post1"]
PYTHON_VERSION = "3.12"
# The Mooncake cuda13 wheel is published only for manylinux_2_35; the device's glibc is 2.39.
UV_PLATFORM = "x86_64-manylinux_2_35"
# Upload cut-off for the resolver, so a re-run months later resolves the same transitive versions.
EXCLUDE_NEWER = "2026-12-01T00:00:00Z"
# Fixed mtime inside the tar so identical inputs give a byte-identical payload (and a cache hit).
TAR_MTIME = "@" + str(int(dt.datetime.fromisoformat(EXCLUDE_NEWER.replace("Z", "+00:00")).timestamp()))

# Versions the device image already has (/work/.library/device/KINDS.md, "pip list" row).  They are
# constraints, so the resolver picks everything else around them and never selects a torch/nvidia wheel.
DEVICE_PINS = {
    "torch": "2.11.0",
    "torchaudio": "2.11.0",
    "torchvision": "0.26.0",
    "triton": "3.6.0",
    "transformers": "5.17.0",
    "tokenizers": "0.23.2",
    "huggingface-hub": "1.33.0",
    "safetensors": "0.8.0",
    "numpy": "2.5.2",
    "accelerate": "1.15.0",
    "sentencepiece": "0.2.2",
    "tiktoken": "0.14.0",
    "cupy-cuda13x": "14.2.0",
    "onnx": "1.23.1",
    "onnxruntime": "1.30.0",
}
# Pins some dependency contradicts although the device runs them: vllm-omni pins accelerate==1.12.0 and
# vllm's numba==0.65.0 wants numpy<2.5.  Neither package is carried, so the device's copy is what runs
# (gpu-staging.md: served with these).  Overrides say "this is what is there" instead of failing.
DEVICE_OVERRIDES = ("numpy", "accelerate")

# What the device image holds (KINDS.md, "Python packages already there"), names only.  Used only to
# report declared dependencies that are neither carried nor there.
_DEVICE_HAS_TEXT = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
    cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
    formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
    imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
    lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
    matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
    networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
    nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
    peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
    pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
    python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
    statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
    tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
    triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
    zipp"""
DEVICE_HAS = frozenset(_DEVICE_HAS_TEXT.split())

# The packages a text-only Qwen3-Omni PD run actually needed: the 47 named in
# /work/shared/reference/gpu-staging.md ("Payload"), plus prometheus-fastapi-instrumentator (the API
# server imports it late) and wcwidth (the stats table).  Everything else in the ~228-package
# resolution is either on the device already or never imported on that path.
KEEP = (
    "vllm", "vllm-omni", "mooncake-transfer-engine-cuda13", "blake3", "setproctitle",
    "pydantic", "pydantic-core", "pydantic-settings", "pydantic-extra-types", "typing-inspection", "annotated-types",
    "python-dotenv", "cbor2", "pyzmq", "openai", "openai-harmony", "httpx2", "sniffio", "msgspec", "pybase64",
    "cachetools", "llguidance", "xgrammar", "apache-tvm-ffi", "loguru", "fastapi", "starlette", "uvicorn",
    "watchfiles", "python-multipart", "omegaconf", "prettytable", "soundfile", "cffi", "partial-json-parser",
    "model-hosting-container-standards", "jmespath", "diffusers", "janus", "mistral-common",
    "jsonschema", "referencing", "rpds-py", "jsonschema-specifications", "pycountry", "ijson", "aenum",
    "prometheus-fastapi-instrumentator", "wcwidth",
)  # fmt: skip

# Paths in the vllm 0.26.0 wheel (relative to site/) that an H200 text-only run never loads.  A listed
# path that is absent fails the build: the wheel changed and the list must be re-checked.
REMOVE = {
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
}

# Debian 12 packages whose libraries Mooncake's engine.so links (libibverbs.so.1, libnuma.so.1,
# libcurl.so.4); their library dependencies are followed with apt-cache.
DEB_ROOTS = ("libibverbs1", "libnuma1", "libcurl4")
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

# A device call carries 64 MiB in all, the working tree (about 4 MiB) included.
PART_BYTES = 56 * 1024 * 1024  # 58,720,256


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


def find_uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if found:
        return found
    cache = os.environ.get("VLLM_OMNI_CACHE", os.path.expanduser("~/.cache/vllm-omni-serve"))
    candidates = sorted(glob.glob(f"{cache}/tools-*/bin/uv"))
    if not candidates:
        sys.exit("uv not found: run `make tools` (it installs uv into the tools venv) or set UV=/path/to/uv")
    return candidates[-1]


# ---------------------------------------------------------------- 1. resolve


def resolve(refresh: bool) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Return {name: version} and {name: [packages that require it]} for the full resolution."""
    rdir = CACHE / "resolve"
    rdir.mkdir(parents=True, exist_ok=True)
    inputs = {
        "requirements.in": "\n".join(REQUIREMENTS) + "\n",
        "constraints.txt": "".join(f"{n}=={v}\n" for n, v in sorted(DEVICE_PINS.items()) if n not in DEVICE_OVERRIDES),
        "overrides.txt": "".join(f"{n}=={DEVICE_PINS[n]}\n" for n in DEVICE_OVERRIDES),
    }
    key = hashlib.sha256(json.dumps([inputs, PYTHON_VERSION, UV_PLATFORM, EXCLUDE_NEWER]).encode()).hexdigest()
    out, stamp = rdir / "resolved.txt", rdir / "resolved.key"
    if refresh or not out.exists() or not stamp.exists() or stamp.read_text() != key:
        for name, text in inputs.items():
            (rdir / name).write_text(text)
        log("resolving with uv pip compile")
        # --no-python-downloads: uv only needs the target's tags, not a 3.12 interpreter.
        run(
            [find_uv(), "pip", "compile", "requirements.in", "--constraints", "constraints.txt",
             "--overrides", "overrides.txt", "--python-version", PYTHON_VERSION, "--python-platform", UV_PLATFORM,
             "--exclude-newer", EXCLUDE_NEWER, "--no-python-downloads", "--no-header", "--annotation-style", "line",
             "--output-file", "resolved.txt", "--quiet"],
            cwd=rdir,
        )  # fmt: skip
        stamp.write_text(key)
    else:
        log("resolution cached (.device/cache/resolve/resolved.txt)")
    versions: dict[str, str] = {}
    required_by: dict[str, list[str]] = {}
    for line in out.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s*(?:#\s*via\s*(.*))?$", line.strip())
        if m:
            name = canon(m.group(1))
            versions[name] = m.group(2)
            required_by[name] = [canon(v.strip()) for v in (m.group(3) or "").split(",") if v.strip()]
    return versions, required_by


# ---------------------------------------------------------------- 2. download wheels


def pip_platform_args() -> list[str]:
    # pip does not widen an explicit manylinux_2_N tag to older ones, so every glibc tag up to the
    # resolution's 2_35 is named; manylinux2014 makes pip add the 2010/1 legacy aliases itself.
    tags = [f"manylinux_2_{n}_x86_64" for n in range(35, 16, -1)] + ["manylinux2014_x86_64"]
    return [arg for tag in tags for arg in ("--platform", tag)]


def cached_wheel(wheels: Path, name: str, version: str) -> Path | None:
    for whl in sorted(wheels.glob("*.whl")):
        parts = whl.name[:-4].split("-")
        if canon(parts[0]) == name and parts[1] == version:
            return whl
    return None


def download(versions: dict[str, str]) -> dict[str, Path]:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [n for n in KEEP if n not in versions]
    if missing:
        sys.exit(f"not in the resolution of {REQUIREMENTS}: {missing}; KEEP (from gpu-staging.md) needs re-checking")
    todo = [f"{n}=={versions[n]}" for n in KEEP if not cached_wheel(wheels, n, versions[n])]
    if todo:
        log(f"downloading {len(todo)} wheels")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
             PYTHON_VERSION, "--implementation", "cp", *pip_platform_args(), "--dest", str(wheels),
             "--disable-pip-version-check", "--progress-bar", "off", "--quiet", *todo],
            stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        # This machine's pip.conf names local file:// indexes that lack most projects; pip warns per
        # project per index.  Only the other lines are worth showing.
        noise = "is ignored: it is neither a file nor a directory"
        sys.stderr.write("".join(ln for ln in proc.stderr.splitlines(keepends=True) if noise not in ln))
        if proc.returncode:
            sys.exit(f"pip download failed (rc {proc.returncode}) for some of: {' '.join(todo)}")
    found = {n: cached_wheel(wheels, n, versions[n]) for n in KEEP}
    lost = [n for n, w in found.items() if w is None]
    if lost:
        sys.exit(f"pip download gave no wheel for {lost} (a newer manylinux tag? see pip_platform_args)")
    return found  # type: ignore[return-value]


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


def build_site(wheels: dict[str, Path]) -> list[dict]:
    if SITE.exists():
        shutil.rmtree(SITE)  # a fresh tree each time, so nothing removed earlier can linger or reappear
    SITE.mkdir(parents=True)
    for name in KEEP:
        dropped = install_wheel(wheels[name], SITE)
        if dropped:
            log(f"{name}: not installed (not importable anyway): {len(dropped)} .data entries, e.g. {dropped[0]}")
    removed = []
    for rel, why in REMOVE.items():
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


def pack() -> tuple[int, str, Path]:
    tar = CACHE / "engine.tar"
    xz = CACHE / "engine.tar.xz"
    stamp = CACHE / "engine.tar.xz.source-sha256"
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


def split(xz: Path) -> list[dict]:
    for old in DEVICE.glob("engine.tar.xz.part*"):
        old.unlink()
    parts = []
    with xz.open("rb") as src:
        while chunk := src.read(PART_BYTES):
            path = DEVICE / f"engine.tar.xz.part{len(parts)}"
            path.write_bytes(chunk)
            parts.append({"name": path.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    return parts


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help="re-resolve even if the cached resolution matches")
    args = ap.parse_args()
    os.nice(10)  # this machine is shared; every child (pip, xz) inherits it
    started = time.monotonic()

    versions, required_by = resolve(args.refresh)
    log(f"resolution: {len(versions)} packages; carrying {len(KEEP)}")
    wheels = download(versions)
    removed = build_site(wheels)
    for r in removed:
        log(f"removed {r['path']} ({mib(r['bytes'])}): {r['reason']}")

    # Declared dependencies of carried packages that neither travel nor sit on the device: the proven
    # run did without them, but a code path that imports one will fail there.
    gaps = sorted(
        f"{dep} (for {', '.join(sorted(set(required_by[dep]) & set(KEEP)))})"
        for dep in versions
        if dep not in KEEP and dep not in DEVICE_HAS and set(required_by.get(dep, [])) & set(KEEP)
    )
    if gaps:
        log("declared but not carried and not on the device: " + "; ".join(gaps))

    closure = deb_closure()
    debs = fetch_debs(closure)
    deb_rows = build_libs(debs)
    log(f"debs: {len(deb_rows)} ({sum(r['into'] == 'lib' for r in deb_rows)} into lib/, rest into lib-fallback/)")
    check_engine_libs()

    sizes = {"site_bytes": tree_bytes(SITE), "lib_bytes": tree_bytes(LIB), "lib_fallback_bytes": tree_bytes(LIB_FALLBACK)}
    tar_bytes, tar_sha, xz = pack()
    parts = split(xz)
    sizes.update(tar_bytes=tar_bytes, xz_bytes=xz.stat().st_size)

    packages = [{"name": n, "version": versions[n], "wheel": w.name, "wheel_bytes": w.stat().st_size} for n, w in wheels.items()]
    manifest = {
        "built": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "build_seconds": round(time.monotonic() - started),
        "builder": "tests/device/build_payload.py",
        "target": {"python": PYTHON_VERSION, "platform": UV_PLATFORM, "exclude_newer": EXCLUDE_NEWER},
        "requirements": REQUIREMENTS,
        "resolution_size": len(versions),
        "packages": packages,
        "removed": removed,
        "declared_not_carried": gaps,
        "debs": deb_rows,
        "sizes": sizes,
        "tar_sha256": tar_sha,
        "parts": parts,
        "device_env": {"PYTHONPATH": "DEST/site", "LD_LIBRARY_PATH": "DEST/lib", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "unpack": "tests/device/unpack_payload.sh DEST PART0 PART1 ...",
    }
    text = json.dumps(manifest, indent=2) + "\n"
    MANIFEST.write_text(text)
    TRACKED_MANIFEST.write_text(text)

    print()
    print(f"packages: {len(KEEP)} of {len(versions)} resolved; site/ {mib(sizes['site_bytes'])}, "
          f"lib/ {mib(sizes['lib_bytes'])}, lib-fallback/ {mib(sizes['lib_fallback_bytes'])}")  # fmt: skip
    print(f"tar {mib(tar_bytes)} -> xz {mib(sizes['xz_bytes'])} ({sizes['xz_bytes']:,} bytes) in {len(parts)} parts:")
    for p in parts:
        print(f"  .device/{p['name']}  {p['bytes']:>11,}  {p['sha256']}")
    print(f"manifest: .device/payload.json (copy: tests/device/payload.json); {manifest['build_seconds']} s")


if __name__ == "__main__":
    main()
