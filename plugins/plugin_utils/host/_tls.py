# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Where the front door's TLS material lives on the controller when the collection makes it.

One CA per controller cache (``$VLLM_OMNI_CACHE/tls/ca.pem``: clients trust it once), one
certificate per router host and address (``<host>-<ip>.pem``: a new address gets a new
certificate). The frontdoor role makes them with ``openssl``; ``make demo`` prints the CA's path.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("VLLM_OMNI_CACHE") or Path(environ.get("HOME", "/root")) / ".cache" / "vllm-omni-serve")


def controller_dir(environ=None) -> Path:
    return cache_root(environ) / "tls"


def host_stem(host: str, ip: str) -> str:
    return f"{host}-{ip}"
