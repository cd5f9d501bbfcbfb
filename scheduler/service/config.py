"""Service configuration from the environment (Nomad's and Consul's own variables win for them)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "LLM_SCHEDULER_"


class ConfigError(ValueError):
    """Settings that cannot be used: one line per bad variable, each naming it and the fix."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class ServiceConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", populate_by_name=True)

    nomad_addr: str = Field("http://127.0.0.1:4646", validation_alias=AliasChoices("NOMAD_ADDR"))
    nomad_token: str | None = Field(None, validation_alias=AliasChoices("NOMAD_TOKEN"))
    nomad_namespace: str = Field("default", validation_alias=AliasChoices("NOMAD_NAMESPACE"))
    nomad_region: str | None = Field(None, validation_alias=AliasChoices("NOMAD_REGION"))
    consul_addr: str = Field(
        "http://127.0.0.1:8500", validation_alias=AliasChoices("CONSUL_HTTP_ADDR")
    )
    consul_token: str | None = Field(None, validation_alias=AliasChoices("CONSUL_HTTP_TOKEN"))

    kv_prefix: str = "llm-scheduler/"
    pass_interval_s: float = Field(10.0, gt=0)
    debounce_s: float = Field(0.1, ge=0)
    # Blocking-query wait; the HTTP timeout is wait + wait/16 + http_margin_s.
    watch_wait_s: float = Field(30.0, gt=0)
    http_margin_s: float = Field(5.0, gt=0)
    backoff_min_s: float = Field(0.2, gt=0)
    backoff_max_s: float = Field(10.0, gt=0)
    session_ttl_s: int = Field(15, ge=10, le=86400)
    # Consul's default lock-delay; a standby cannot take the lock sooner after a crash.
    lock_delay_s: int = Field(15, ge=0, le=60)
    purge_after_s: float = Field(60.0, ge=0)
    # Nomad registers and stops run on this many workers, beside the pass loop (0: inline).
    actuation_workers: int = Field(8, ge=0, le=64)
    # On shutdown, how long queued actions may take to go out before the lock is released.
    shutdown_drain_s: float = Field(30.0, ge=0)
    # /healthz turns 503 after this many failed passes in a row (a crash or a failed read).
    unhealthy_after_failures: int = Field(3, ge=1)
    listen_addr: str = "127.0.0.1:9464"
    demand_source: str = "consul"
    prometheus_url: str = "http://127.0.0.1:9090"
    # Scaling signals from the model servers: "scrape" reads each ready replica's
    # /metrics, "prometheus" asks prometheus_url (also implied by demand_source=prometheus),
    # "none" scales on the KV demand only. The gateway's KV demand counts in every case.
    signals: str = Field("none", pattern="^(none|scrape|prometheus)$")
    scrape_concurrency: int = Field(64, ge=1, le=1024)
    scrape_timeout_s: float = Field(2.0, gt=0)
    # Latency percentiles cover the buckets observed over this window.
    signal_window_s: float = Field(60.0, gt=0)
    # With signals on, a pass runs at least this often: a broken objective changes nothing the
    # watches see, so only a pass notices it.
    signal_interval_s: float = Field(2.0, gt=0)
    jobspec_dir: str | None = None
    # The Nomad host volume replicas mount as their Hugging Face cache, where a node has it.
    model_cache_volume: str = Field(
        "llm-model-cache", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
    )
    image_vllm: str = "vllm/vllm-openai:latest"
    image_sglang: str = "lmsysorg/sglang:latest"
    log_format: str = Field("console", pattern="^(console|json)$")
    max_value_bytes: int = Field(64 * 1024, gt=0)
    http_keepalive: bool = False

    @field_validator("listen_addr")
    @classmethod
    def _host_port(cls, value: str) -> str:
        port = value.rpartition(":")[2]
        if not port.isdigit() or int(port) > 65535:
            raise ValueError("should be host:port, such as 127.0.0.1:9464")
        return value

    def consul_parts(self) -> tuple[str, int, str]:
        """(host, port, scheme) of CONSUL_HTTP_ADDR, which may lack a scheme as in Consul's CLI."""
        addr = self.consul_addr if "://" in self.consul_addr else "http://" + self.consul_addr
        parts = urlsplit(addr)
        scheme = parts.scheme or "http"
        return (
            parts.hostname or "127.0.0.1",
            parts.port or (443 if scheme == "https" else 8500),
            scheme,
        )

    def nomad_base(self) -> str:
        addr = self.nomad_addr if "://" in self.nomad_addr else "http://" + self.nomad_addr
        return addr.rstrip("/")

    def http_timeout(self, wait_s: float) -> float:
        return wait_s + wait_s / 16 + self.http_margin_s


def env_name(field: str) -> str:
    """The environment variable that sets `field` (NOMAD_ADDR, LLM_SCHEDULER_PASS_INTERVAL_S)."""
    info = ServiceConfig.model_fields.get(field)
    alias = info.validation_alias if info else None
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return ENV_PREFIX + field.upper()


def _problem(error: Any) -> str:
    field = str(error["loc"][0]) if error["loc"] else "?"
    info = ServiceConfig.model_fields.get(field)
    default = info.default if info else None
    fix = "unset it for the default" + (f" ({default})" if default is not None else "")
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{env_name(field)}={error['input']!r}: {message}; correct it, or {fix}"


def load_config(**overrides: Any) -> ServiceConfig:
    """The settings from the environment; ConfigError names each bad variable on its own line."""
    try:
        return ServiceConfig(**overrides)
    except ValidationError as exc:
        raise ConfigError([_problem(e) for e in exc.errors()]) from None
