# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""vllm_omni.serve's GPU health exporter: one per engine host (vllm-omni-gpu-metrics.service), from the plan's
gpu-metrics.json.

On each scrape it runs ``nvidia-smi -q -x`` (the driver's own tool, NVML underneath: nothing to install beside the
driver, which an air-gapped GPU host has) and answers Prometheus with, per GPU (label ``gpu``: nvidia-smi's index,
the numbering vllm_omni_gpus uses):

* presence of every GPU the plan placed a stage on (``vllm_omni_gpu_present`` 0: it fell off the bus or the driver
  lost it; ``vllm_omni_gpu_nvidia_smi_up`` 0: nvidia-smi itself failed);
* utilisation, framebuffer memory used and total, temperature, power draw and limit;
* volatile ECC errors (corrected, uncorrected) and remapped rows (pending, failed);
* Xid errors: the driver's ``NVRM: Xid (PCI:<bus id>): <code>, ...`` lines of the kernel log (/dev/kmsg), counted
  per GPU and code since the exporter started reading the log (it reads the ring buffer from its start, so a
  restart finds the same ones again). NVML reports Xids only to a process that subscribed before they happened;
  the kernel log keeps them.

A scrape within ``cache_s`` of the last one is answered from that one (two Prometheus servers scrape one host).
Standard library only: it runs on the host's own python3 (3.9 and later).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.etree import ElementTree

# Where the driver's packages and NVIDIA's .run installer put nvidia-smi; looked up on each scrape (a driver
# installed or upgraded after the exporter started is found).
SEARCH_PATH = "/usr/bin:/usr/local/bin:/usr/sbin:/usr/local/sbin:/bin"
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
HELP = {
    "nvidia_smi_up": ("gauge", "1 when nvidia-smi -q -x ran and was read on the last scrape"),
    "present": ("gauge", "1 when nvidia-smi lists the GPU; 0 for a GPU the plan placed a stage on that it lists no more"),
    "utilization_ratio": ("gauge", "Time the GPU was busy over nvidia-smi's last sample period (0 to 1)"),
    "memory_used_bytes": ("gauge", "Framebuffer memory in use"),
    "memory_total_bytes": ("gauge", "Framebuffer memory"),
    "temperature_celsius": ("gauge", "GPU core temperature"),
    "power_watts": ("gauge", "Power draw"),
    "power_limit_watts": ("gauge", "Power limit in force"),
    "ecc_errors": ("gauge", "Volatile ECC errors since the driver loaded, by kind (corrected, uncorrected)"),
    "remapped_rows": ("gauge", "Memory rows remapped for errors, by cause (correctable, uncorrectable)"),
    "row_remap_pending": ("gauge", "1 when a row remap waits for a GPU reset to take effect"),
    "row_remap_failed": ("gauge", "1 when a row remap failed: the GPU needs service"),
    "xid_errors_total": ("counter", "Xid errors the driver logged for the GPU, by Xid code"),
    "kernel_log_readable": ("gauge", "1 when the exporter reads the kernel log (Xid errors are counted)"),
}


def say(line: str) -> None:
    print(line, flush=True)


def number(text: str | None) -> float | None:
    """The leading number of an nvidia-smi value ("81559 MiB", "37 C", "78.22 W", "0 %"); None for N/A and the like."""
    match = NUMBER.match(text or "")
    return float(match.group(1)) if match else None


def bus_id(text: str) -> str:
    """A PCI bus id in one spelling: nvidia-smi's 00000000:18:00.0 and the kernel's 0000:18:00.0 -> 0000:18:00.0."""
    parts = text.strip().lower().split(":")
    if len(parts) == 3 and parts[0]:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return text.strip().lower()


def device_key(text: str) -> str:
    """What the kernel's Xid line names a GPU by: domain, bus and device ("NVRM: Xid (PCI:0000:3b:00): 79, ..."),
    without nvidia-smi's function number."""
    return bus_id(text).partition(".")[0]


def value_text(value: float) -> str:
    """A sample's value, exact for whole numbers (memory in bytes is past float's %g)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def yes_no(text: str | None) -> int | None:
    value = (text or "").strip().lower()
    return {"yes": 1, "no": 0}.get(value)


def _first(gpu: ElementTree.Element, *paths: str) -> float | None:
    for path in paths:
        value = number(gpu.findtext(path))
        if value is not None:
            return value
    return None


def ecc(volatile: ElementTree.Element | None) -> dict:
    """Volatile ECC error counts by kind. The tags vary with the generation and driver: Hopper's sram_correctable,
    sram_uncorrectable_parity, sram_uncorrectable_secded, dram_correctable, dram_uncorrectable; older drivers'
    single_bit/total and double_bit/total. N/A (ECC off, or a GPU without it): no sample."""
    found: dict[str, list[float]] = {"corrected": [], "uncorrected": []}
    for child in [] if volatile is None else list(volatile):
        if "_uncorrectable" in child.tag or child.tag == "double_bit":
            kind = "uncorrected"
        elif "_correctable" in child.tag or child.tag == "single_bit":
            kind = "corrected"
        else:
            continue
        value = number(child.findtext("total") if len(child) else child.text)
        if value is not None:
            found[kind].append(value)
    return {kind: sum(values) for kind, values in found.items() if values}


def read_gpus(xml_text: str) -> list[dict]:
    """nvidia-smi -q -x's GPUs, in its order (the index), each as the exporter's values."""
    root = ElementTree.fromstring(xml_text)  # noqa: S314 (nvidia-smi's own output; expat 2.4+ bounds expansion)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        mib = 1024 * 1024
        used, total = number(gpu.findtext("fb_memory_usage/used")), number(gpu.findtext("fb_memory_usage/total"))
        utilization = number(gpu.findtext("utilization/gpu_util"))
        volatile = gpu.find("ecc_errors/volatile")
        gpus.append({
            "index": index,
            "uuid": (gpu.findtext("uuid") or "").strip(),
            "name": (gpu.findtext("product_name") or "").strip(),
            "bus_id": bus_id(gpu.get("id") or gpu.findtext("pci/pci_bus_id") or ""),
            "utilization_ratio": None if utilization is None else utilization / 100,
            "memory_used_bytes": None if used is None else used * mib,
            "memory_total_bytes": None if total is None else total * mib,
            "temperature_celsius": number(gpu.findtext("temperature/gpu_temp")),
            # Newer drivers: gpu_power_readings with instant and average draw; older: power_readings/power_draw.
            "power_watts": _first(gpu, "gpu_power_readings/instant_power_draw", "gpu_power_readings/power_draw",
                                  "gpu_power_readings/average_power_draw", "power_readings/power_draw"),
            "power_limit_watts": _first(gpu, "gpu_power_readings/current_power_limit",
                                        "gpu_power_readings/enforced_power_limit", "power_readings/power_limit",
                                        "power_readings/enforced_power_limit"),
            "ecc_errors": ecc(volatile),
            "remapped_rows": {cause: value for cause, value in (
                ("correctable", number(gpu.findtext("remapped_rows/remapped_row_corr"))),
                ("uncorrectable", number(gpu.findtext("remapped_rows/remapped_row_unc")))) if value is not None},
            "row_remap_pending": yes_no(gpu.findtext("remapped_rows/remapped_row_pending")),
            "row_remap_failed": yes_no(gpu.findtext("remapped_rows/remapped_row_failure")),
        })
    return gpus


class KernelLog:
    """Xid lines of the kernel log, counted per (PCI bus id, Xid code). /dev/kmsg hands each reader every record of
    the ring buffer from its start, then new ones as they come; a read that would block means none is left."""

    def __init__(self, path: str):
        self.path, self.counts, self._fd, self.readable = path, {}, None, False

    def read(self) -> None:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                self.readable = False
                return
        self.readable = True
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return
            except BrokenPipeError:  # the ring buffer overwrote records before we read them: go on with the next
                continue
            except OSError:
                os.close(self._fd)
                self._fd, self.readable = None, False
                return
            if not record:  # a regular file (tests, a replayed log): read once to its end
                return
            for line in record.decode("utf-8", "replace").splitlines():
                match = XID.search(line)
                if match:
                    key = (device_key(match.group(1)), int(match.group(2)))
                    self.counts[key] = self.counts.get(key, 0) + 1


class Exporter:
    def __init__(self, config: dict, run=subprocess.run, clock=time.monotonic):
        self.config, self._run, self._clock = config, run, clock
        self.kernel_log = KernelLog(config["kernel_log"])
        self._lock, self._cached, self._cached_at = threading.Lock(), "", None

    def _nvidia_smi(self) -> list[dict] | None:
        binary = shutil.which(self.config["nvidia_smi"], path=SEARCH_PATH) or self.config["nvidia_smi"]
        try:
            done = self._run([binary, "-q", "-x"], capture_output=True, text=True,
                             timeout=self.config["timeout_s"], check=False)
            return read_gpus(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ElementTree.ParseError):
            return None

    def metrics(self) -> str:
        with self._lock:
            now = self._clock()
            if self._cached_at is None or now - self._cached_at >= self.config["cache_s"]:
                self._cached, self._cached_at = self._collect(), now
            return self._cached

    def _collect(self) -> str:
        gpus = self._nvidia_smi()
        self.kernel_log.read()
        samples: dict[str, list[str]] = {name: [] for name in HELP}
        samples["nvidia_smi_up"].append(f" {0 if gpus is None else 1}")
        samples["kernel_log_readable"].append(f" {1 if self.kernel_log.readable else 0}")
        listed = {gpu["index"]: gpu for gpu in gpus or []}
        by_device = {device_key(gpu["bus_id"]): gpu for gpu in gpus or []}
        for index in sorted(set(self.config["gpus"]) | set(listed)):
            gpu = listed.get(index)
            if gpu is None:
                samples["present"].append(f'{{gpu="{index}"}} 0')
                continue
            labels = f'gpu="{index}",uuid="{gpu["uuid"]}",bus_id="{gpu["bus_id"]}"'
            samples["present"].append(f'{{{labels},name="{gpu["name"]}"}} 1')
            for name in ("utilization_ratio", "memory_used_bytes", "memory_total_bytes", "temperature_celsius",
                         "power_watts", "power_limit_watts", "row_remap_pending", "row_remap_failed"):
                if gpu[name] is not None:
                    samples[name].append(f"{{{labels}}} {value_text(gpu[name])}")
            for name, key in (("ecc_errors", "kind"), ("remapped_rows", "cause")):
                for kind, value in gpu[name].items():
                    if value is not None:
                        samples[name].append(f'{{{labels},{key}="{kind}"}} {value_text(value)}')
        for (device, code), count in sorted(self.kernel_log.counts.items()):
            gpu = by_device.get(device)  # not listed: the GPU fell off the bus (Xid 79) and is named by its address
            where = (f'gpu="{gpu["index"]}",uuid="{gpu["uuid"]}",bus_id="{gpu["bus_id"]}"' if gpu
                     else f'gpu="",bus_id="{device}"')
            samples["xid_errors_total"].append(f'{{{where},xid="{code}"}} {count}')
        lines = []
        for name, (kind, text) in HELP.items():
            if samples[name]:
                lines += [f"# HELP vllm_omni_gpu_{name} {text}.", f"# TYPE vllm_omni_gpu_{name} {kind}"]
                lines += [f"vllm_omni_gpu_{name}{sample}" for sample in samples[name]]
        return "\n".join(lines) + "\n"


def serve(exporter: Exporter, address: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = exporter.metrics().encode() if self.path.split("?")[0] == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # Prometheus scrapes every 15 s: not the journal's business
            return

    return ThreadingHTTPServer((address, port), Handler)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} GPU_METRICS_JSON", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    exporter = Exporter(config)
    server = serve(exporter, config["address"], config["port"])
    first = exporter.metrics()
    say(f"gpu-metrics: on {config['address']}:{config['port']}; GPUs of the plan {config['gpus']}; nvidia-smi "
        f"{'read' if 'vllm_omni_gpu_nvidia_smi_up 1' in first else 'FAILED'}; kernel log "
        f"{'read' if exporter.kernel_log.readable else 'not readable: Xid errors are not counted'}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
