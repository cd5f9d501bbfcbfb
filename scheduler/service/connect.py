"""The service's connections: Consul and Nomad clients, and the parts that use them."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.adapters.consul_kv import ConsulClient, make_consul
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.nomad_listings import Listings
from scheduler.adapters.snapshot_builder import SnapshotBuilder
from scheduler.adapters.status_writer import StatusWriter
from scheduler.plugins import demand_source, signal_source
from scheduler.service.actuator import Actuator
from scheduler.service.config import ServiceConfig


@dataclass
class Connected:
    layout: KVLayout
    consul: ConsulClient
    nomad: NomadAPI
    builder: SnapshotBuilder
    actuator: Actuator
    status: StatusWriter


def connect(config: ServiceConfig) -> Connected:
    layout = KVLayout(config.kv_prefix)
    host, port, scheme = config.consul_parts()
    consul = make_consul(host, port, scheme, config.consul_token, config.http_keepalive)
    nomad = NomadAPI(
        config.nomad_base(),
        token=config.nomad_token,
        namespace=config.nomad_namespace,
        region=config.nomad_region,
        keepalive=config.http_keepalive,
    )
    builder = SnapshotBuilder(
        nomad,
        consul,
        layout,
        demand_source=demand_source(config),
        signal_source=signal_source(config),
        max_value_bytes=config.max_value_bytes,
        # A watch answers at least once per wait; an answer older than that is not used.
        listings=Listings(max_age_s=config.http_timeout(config.watch_wait_s)),
    )
    actuator = Actuator(
        nomad,
        namespace=config.nomad_namespace,
        images={"vllm": config.image_vllm, "sglang": config.image_sglang},
        jobspec_dir=config.jobspec_dir,
        workers=config.actuation_workers,
        on_registered=builder.learn,
        model_cache_volume=config.model_cache_volume,
    )
    status = StatusWriter(consul, layout)
    return Connected(layout, consul, nomad, builder, actuator, status)
