"""Fault injection through the stand-in: 500 rate and latency, seen by py-consul."""

from __future__ import annotations

import time

import pytest

import consul
from llm_scheduler_standins.consul import ConsulStandin
from llm_scheduler_standins.faults import Faults


def test_error_rate_and_latency() -> None:
    faults = Faults(seed=7)
    standin = ConsulStandin(faults=faults, jitter=False)
    server = standin.start()
    try:
        c = consul.Consul(host=server.host, port=server.port)
        c.kv.put("k", "v")
        faults.set("/v1/kv/", error_rate=0.5)
        failures = 0
        for _ in range(40):
            try:
                c.kv.get("k")
            except consul.ConsulException as error:
                assert str(error).startswith("500 ")
                failures += 1
        assert 8 <= failures <= 32
        faults.set("/v1/kv/", error_rate=1.0)
        with pytest.raises(consul.ConsulException, match=r"^500"):
            c.kv.get("k")
        c.session.list()  # other prefixes are untouched
        faults.set("/v1/kv/", latency_s=0.2)
        started = time.monotonic()
        assert c.kv.get("k")[1]["Value"] == b"v"
        assert time.monotonic() - started >= 0.2
        faults.clear()
        started = time.monotonic()
        c.kv.get("k")
        assert time.monotonic() - started < 0.2
    finally:
        standin.close()
