"""The service's watches: a blocking query on each input of a pass, each waking the loop.

Nomad's listings are kept as each watch last fetched them (Listings), so that a pass can take
them instead of asking again. One more watch, on the whole KV prefix, wakes nothing: it is the
carry-over's guard (a change anywhere under the prefix means a pass cannot be carried over).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.adapters.consul_kv import CONSUL_ERRORS, ConsulClient, ConsulError, kv_list
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.nomad_listings import ALLOCATIONS, JOBS, LISTINGS, NODES, Listing, Listings
from scheduler.service.config import ServiceConfig
from scheduler.service.watch import Backoff, BlockingWatch

KV_ALL = "consul-kv"  # the watch of the whole KV prefix (the carry-over's guard)

Fetch = Callable[[int], int]


def make_watches(
    config: ServiceConfig,
    client: ConsulClient,
    nomad: NomadAPI,
    layout: KVLayout,
    listings: Listings,
    wake: Callable[[], None],
    stop: threading.Event,
    backoff: Callable[[], Backoff],
) -> list[BlockingWatch]:
    """One watch per input of a pass (each calls `wake` on a change), and the KV guard."""
    wait, margin = config.watch_wait_s, config.http_margin_s

    def kv(prefix: str) -> Fetch:
        return lambda index: kv_list(client, prefix, index=index, wait_s=wait, margin_s=margin)[0]

    sources: dict[str, Fetch] = {
        "models": kv(layout.models),
        "quotas": kv(layout.quotas),
        "demand": kv(layout.demand),
        "settings": kv(layout.settings),
        "gpu-reports": kv(layout.nodes),
        NODES: _nomad_listing(nomad, listings, NODES, wait, margin),
        ALLOCATIONS: _nomad_listing(nomad, listings, ALLOCATIONS, wait, margin),
        JOBS: _nomad_listing(nomad, listings, JOBS, wait, margin),
        "consul-health": _consul_health(client, wait),
    }
    watches = [BlockingWatch(name, fetch, wake, stop, backoff()) for name, fetch in sources.items()]
    everything = _whole_prefix(client, layout.prefix, wait)
    watches.append(BlockingWatch(KV_ALL, everything, _nothing, stop, backoff()))
    return watches


def _nomad_listing(
    nomad: NomadAPI, listings: Listings, name: str, wait: float, margin: float
) -> Fetch:
    """Watch one of the snapshot's listings and keep each answer for the next pass."""
    path, params = LISTINGS[name]

    def fetch(index: int) -> int:
        asked = time.monotonic()
        listings.asking(name, asked)
        try:
            body, new = nomad.read(path, params, index=index, wait_s=wait, margin_s=margin)
        except Exception:
            listings.forget(name)  # the pass reads it, and fails if it cannot
            raise
        listings.put(name, Listing(body, new, asked, time.monotonic()))
        return new

    return fetch


def _consul_health(client: ConsulClient, wait: float) -> Fetch:
    def health(index: int) -> int:
        kwargs: dict[str, Any] = {}
        if index > 0:
            kwargs = {"index": index, "wait": f"{int(wait)}s"}
        try:
            idx, _ = client.health.state("any", **kwargs)
        except CONSUL_ERRORS as exc:
            raise ConsulError(str(exc)) from exc
        return int(idx or 0)

    return health


def _whole_prefix(client: ConsulClient, prefix: str, wait: float) -> Fetch:
    def everything(index: int) -> int:
        """Any key under the prefix, the scheduler's own state and status keys too: the
        carry-over's guard (it wakes no pass). Keys only, folded at the first "/" below the
        prefix: a few names, at the index of the whole prefix (Consul's KVSListKeys in
        agent/consul/state/kvs.go takes the highest ModifyIndex of every key under the
        prefix, folded or not, or the prefix's tombstones')."""
        kwargs: dict[str, Any] = {"keys": True, "separator": "/"}
        if index > 0:
            kwargs.update(index=index, wait=f"{int(wait)}s")
        try:
            idx, _ = client.kv.get(prefix, **kwargs)
        except CONSUL_ERRORS as exc:
            raise ConsulError(str(exc)) from exc
        return int(idx or 0)

    return everything


def _nothing() -> None:
    """A watch that wakes no pass."""
