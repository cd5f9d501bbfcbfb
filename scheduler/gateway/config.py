"""Gateway settings from the environment (Consul's own variables win for Consul)."""

from __future__ import annotations

import os
import socket
import uuid

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_instance() -> str:
    """Unique per process: a restarted gateway writes a new key, never re-acquires an old
    one (which Consul's lock-delay would refuse for a while)."""
    host = socket.gethostname().split(".")[0] or "gateway"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GatewayConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LLM_SCHEDULER_GATEWAY_", extra="ignore", populate_by_name=True
    )

    consul_addr: str = Field(
        "http://127.0.0.1:8500", validation_alias=AliasChoices("CONSUL_HTTP_ADDR", "consul_addr")
    )
    consul_token: str | None = Field(
        None, validation_alias=AliasChoices("CONSUL_HTTP_TOKEN", "consul_token")
    )
    kv_prefix: str = "llm-scheduler/"
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    instance: str = Field(default_factory=default_instance, pattern=r"^[A-Za-z0-9._-]{1,128}$")
    # Gateway-wide defaults of the per-model bounds on held requests (a model's own
    # `activation_timeout_s` / `max_queued` win).
    activation_timeout_s: float = Field(600.0, gt=0)
    max_queued: int = Field(1000, ge=0)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # How often held requests' models have their registered, not yet passing replicas probed.
    probe_interval_s: float = Field(0.25, gt=0)
    # Demand: written at most this often while counts change, and this often while requests
    # flow even when they do not (last_used stays fresh).
    demand_interval_s: float = Field(1.0, gt=0)
    demand_heartbeat_s: float = Field(5.0, gt=0)
    session_ttl_s: int = Field(15, ge=10, le=86400)
    # How often the session is renewed; None: every TTL/2, as Consul's own client does.
    session_renew_s: float | None = Field(None, gt=0)
    # Replicas' queue and KV-cache readings, for balancing; 0: not read.
    signals_interval_s: float = Field(2.0, ge=0)
    watch_wait_s: float = Field(60.0, gt=0)
    connect_timeout_s: float = Field(2.0, gt=0)
    # No limit on reading a reply: a long generation streams for as long as it takes.
    read_timeout_s: float | None = None
    max_connections: int = Field(1000, ge=1)
    drain_timeout_s: float = Field(30.0, ge=0)
    retry_after_s: int = Field(30, ge=1, le=120)
    log_format: str = Field("console", pattern="^(console|json)$")
    log_requests: bool = True
