# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Typed groups of the validated deployment settings: the values that travel together, as attributes.

The settings table (_settings) validates each ``vllm_omni_*`` variable on its own; a group is what one part of
the planner reads: the port allocator (``PortSettings``), the router (``RouterSettings``), the engines' argv
(``EngineProcessSettings``), the KV transfer (``KvTransferSettings``), the front door, the Mooncake master and
monitoring (``FrontDoorSettings``, ``MasterSettings``, ``MonitoringSettings``). A field's name is
its setting's name without the group's prefix (``setting()`` gives the variable back for error messages), so
a group holds nothing the table does not, and a setting renamed there fails here at the first plan.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class _Group:
    PREFIX: ClassVar[str] = "vllm_omni_"
    # Fields whose setting does not follow PREFIX + field name.
    SETTING_OF: ClassVar[dict[str, str]] = {}

    @classmethod
    def setting(cls, field: str) -> str:
        """The inventory variable a field comes from (what an error names)."""
        return cls.SETTING_OF.get(field, cls.PREFIX + field)

    @classmethod
    def of(cls, settings: dict):
        """The group from the validated settings (name -> value); lists become tuples."""
        return cls(**{f.name: _frozen(settings[cls.setting(f.name)]) for f in fields(cls)})


@dataclass(frozen=True)
class PortSettings(_Group):
    """Everything ``_ports`` assigns a host's ports from and checks them against."""

    layout: str
    kv_connector: str
    tensor_parallel_size: int
    # Engine processes: one port or one slice each, by index on the host.
    api_port_base: int
    bootstrap_port_base: int
    mooncake_rpc_port_range: tuple[int, int]
    mooncake_rpc_ports_per_pipeline: int
    nixl_side_channel_port_base: int
    nixl_ucx_port_range: tuple[int, int]
    nixl_ucx_ports_per_pipeline: int
    stage_master_port_base: int
    stage_zmq_port_range: tuple[int, int]
    stage_zmq_ports_per_process: int
    # Services: one port each on the hosts that run them.
    router_port: int
    router_metrics_port: int
    router_backend_port: int
    frontdoor_enabled: bool
    mooncake_master_rpc_port: int
    mooncake_master_metrics_port: int
    prometheus_port: int
    self_heal_port: int  # on every engine host
    gpu_metrics_port: int  # on every engine host


@dataclass(frozen=True)
class RouterSettings(_Group):
    """vllm-router's command line and the plan's router section."""

    PREFIX: ClassVar[str] = "vllm_omni_router_"
    SETTING_OF: ClassVar[dict[str, str]] = {"frontdoor_enabled": "vllm_omni_frontdoor_enabled",
                                            "api_key_required": "vllm_omni_api_key_required",
                                            "install_root": "vllm_omni_install_root"}

    port: int
    metrics_port: int
    backend_port: int  # its port on loopback behind the front door
    policy: str
    request_timeout: int
    health_check_interval: int
    max_retries: int  # 0: retries off
    cb_failure_threshold: int  # 0: circuit breaker off
    cb_timeout: int
    log_level: str
    frontdoor_enabled: bool
    api_key_required: bool
    install_root: str


@dataclass(frozen=True)
class EngineProcessSettings(_Group):
    """What every engine process's argv and environment are made of (``_engine_argv``), the KV transfer's apart."""

    SETTING_OF: ClassVar[dict[str, str]] = {"backend": "vllm_omni_engine_backend"}

    backend: str  # engine or simulator
    model: str
    init_timeout: int
    replica_lb_policy: str
    hf_home: str
    model_staging: bool
    model_source: str
    model_revision: str | None
    extra_env: dict


@dataclass(frozen=True)
class KvTransferSettings(_Group):
    """A PD pipeline's KV transfer: the connector, and what its environment and the plan's section say."""

    layout: str
    kv_connector: str  # mooncake or nixl
    kv_load_failure_policy: str
    mooncake_protocol: str
    mooncake_rdma_devices: tuple[str, ...]
    mooncake_abort_timeout: int


@dataclass(frozen=True)
class FrontDoorSettings(_Group):
    """The TLS front door on the router hosts: on or off, the key check, and the operator's TLS files if any."""

    SETTING_OF: ClassVar[dict[str, str]] = {"enabled": "vllm_omni_frontdoor_enabled"}

    enabled: bool
    api_key_required: bool
    tls_cert_file: str | None  # None: the collection makes the certificate
    tls_key_file: str | None
    tls_ca_file: str | None
    tls_certificate_days: int  # the certificates the collection makes (tls_cert_file None)
    tls_certificate_renew_days: int


@dataclass(frozen=True)
class MasterSettings(_Group):
    """The Mooncake master service (the plan's ``master``)."""

    PREFIX: ClassVar[str] = "vllm_omni_mooncake_master_"
    SETTING_OF: ClassVar[dict[str, str]] = {"install_root": "vllm_omni_install_root"}

    enabled: bool
    rpc_port: int
    metrics_port: int
    install_root: str


@dataclass(frozen=True)
class MonitoringSettings(_Group):
    """Prometheus on the monitoring hosts, and which services it has targets for."""

    SETTING_OF: ClassVar[dict[str, str]] = {"enabled": "vllm_omni_monitoring_enabled"}

    enabled: bool
    prometheus_port: int
    frontdoor_enabled: bool
    mooncake_master_enabled: bool
    alert_ttft_seconds: float
    alert_certificate_days: int
