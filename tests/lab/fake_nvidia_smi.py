#!/usr/bin/python3
"""GPU STAND-IN for lab machines only: replays nvidia-smi outputs captured on a real GPU host.

Placed at /usr/local/bin/nvidia-smi by `tests/lab/lab.py up --gpu-profile NAME` (never by a role),
reading /usr/local/share/fake-nvidia-smi/ (a copy of tests/fixtures/gpu/NAME/). It answers the
invocations the collection's GPU discovery and preflight make, from the captured files:

  nvidia-smi                                   -> nvidia-smi.txt
  nvidia-smi -q -x                             -> nvidia-smi-q.xml
  nvidia-smi topo -m                           -> topo-m.txt
  nvidia-smi nvlink -s                         -> nvlink-s.txt
  nvidia-smi --query-gpu=F1,F2,... --format=csv[,noheader][,nounits]
                                               -> the rows of query-gpu.csv, columns picked by name
  nvidia-smi --query-compute-apps=... --format=csv,...
                                               -> compute-apps.csv (absent: no processes)

Tests mark GPUs busy by writing compute-apps.csv / memory-used overrides into that directory.
Anything else exits 2 saying it is not replayed, so a new invocation cannot silently pass.
"""

import os
import sys

DATA = os.environ.get("FAKE_NVIDIA_SMI_DIR", "/usr/local/share/fake-nvidia-smi")
# Column order of query-gpu.csv as captured (nvidia-smi --query-gpu=<these> --format=csv,noheader,nounits).
CAPTURED_COLUMNS = ["index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "driver_version",
                    "compute_cap", "persistence_mode", "mig.mode.current"]
UNITS = {"memory.total": " MiB", "memory.used": " MiB", "memory.free": " MiB", "used_memory": " MiB"}
COMPUTE_APP_COLUMNS = ["pid", "gpu_uuid", "process_name", "used_memory"]


def read(name):
    path = os.path.join(DATA, name)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def emit(name):
    text = read(name)
    if text is None:
        sys.stderr.write(f"fake nvidia-smi: no captured {name}\n")
        return 2
    sys.stdout.write(text)
    return 0


def csv_rows(text, columns):
    rows = []
    for line in (text or "").splitlines():
        if line.strip():
            cells = [cell.strip() for cell in line.split(",")]
            rows.append(dict(zip(columns, cells)))  # noqa: B905 - short rows simply lack the later fields
    return rows


def query(fields, fmt, source, columns):
    options = set(fmt.split(","))
    if "csv" not in options:
        sys.stderr.write("fake nvidia-smi: only --format=csv is replayed\n")
        return 2
    rows = csv_rows(read(source), columns)
    overrides = csv_rows(read("memory-used.csv"), ["index", "memory.used"]) if source == "query-gpu.csv" else []
    for override in overrides:
        for row in rows:
            if row.get("index") == override["index"]:
                row["memory.used"] = override["memory.used"]
    out = []
    if "noheader" not in options:
        out.append(", ".join(f + ("" if "nounits" in options or f not in UNITS else " [MiB]") for f in fields))
    for row in rows:
        cells = []
        for field in fields:
            if field not in row:
                sys.stderr.write(f"fake nvidia-smi: field {field!r} was not captured\n")
                return 2
            cells.append(row[field] + ("" if "nounits" in options else UNITS.get(field, "")))
        out.append(", ".join(cells))
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def main(argv):
    if not os.path.isdir(DATA):
        sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
        return 9
    if not argv:
        return emit("nvidia-smi.txt")
    if argv == ["-q", "-x"] or argv == ["-x", "-q"]:
        return emit("nvidia-smi-q.xml")
    if argv == ["topo", "-m"]:
        return emit("topo-m.txt")
    if argv == ["nvlink", "-s"]:
        return emit("nvlink-s.txt")
    options = dict(arg.split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    if len(options) == len(argv) and "--format" in options:
        if "--query-gpu" in options:
            return query(options["--query-gpu"].split(","), options["--format"], "query-gpu.csv", CAPTURED_COLUMNS)
        if "--query-compute-apps" in options:
            return query(options["--query-compute-apps"].split(","), options["--format"], "compute-apps.csv",
                         COMPUTE_APP_COLUMNS)
    sys.stderr.write(f"fake nvidia-smi: {' '.join(argv)!r} is not replayed by the lab stand-in\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
