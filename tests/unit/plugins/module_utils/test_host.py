"""Host parsing: listening sockets from /proc/net/tcp*, and which of our units owns a process."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.module_utils._host import owner_unit, parse_proc_net_tcp

# /proc/net/tcp* lines as the kernel prints them (long on purpose).
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B4D4D0A:1F9B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0
   2: 0B4D4D0A:0016 0A4D4D0A:C350 01 00000000:00000000 02:000AE2D4 00000000     0        0 99 2 0000000000000000 20 4 29 10 -1
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000B4D4D0A:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 556 1 0000000000000000 100 0 0 10 0
"""


def test_ipv4_listeners_only():
    assert parse_proc_net_tcp(TCP) == [{"address": "10.77.77.11", "port": 8091, "inode": 4242},
                                       {"address": "0.0.0.0", "port": 22, "inode": 17}]


def test_ipv6_any_and_mapped_addresses():
    assert parse_proc_net_tcp(TCP6, ipv6=True) == [{"address": "::", "port": 8000, "inode": 555},
                                                   {"address": "10.77.77.11", "port": 9090, "inode": 556}]


def test_owner_units_are_only_ours():
    own = ["vllm-omni@.service", "vllm-omni-router.service", "mooncake-master.service", "prometheus.service"]
    assert owner_unit("0::/system.slice/system-vllm\\x2domni.slice/vllm-omni@omni1.service\n", own) == "vllm-omni@omni1.service"
    assert owner_unit("0::/system.slice/vllm-omni-router.service\n", own) == "vllm-omni-router.service"
    assert owner_unit("0::/system.slice/mooncake-master.service\n", own) == "mooncake-master.service"
    assert owner_unit("0::/system.slice/prometheus.service\n", own) == "prometheus.service"
    assert owner_unit("0::/system.slice/nginx.service\n", own) is None
    assert owner_unit("0::/system.slice/vllm-omni-router.service\n", []) is None  # nothing is ours without a plan
