"""Fixtures: a Nomad stand-in over the built-in fleet, and python-nomad pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nomad_helpers import RecordingRegistry

import nomad
from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import Node


@pytest.fixture(scope="module")
def fleet() -> list[Node]:
    return builtin_fleet()


@pytest.fixture
def registry() -> RecordingRegistry:
    return RecordingRegistry()


@pytest.fixture
def standin(fleet: list[Node], registry: RecordingRegistry) -> Iterator[NomadStandin]:
    server = NomadStandin(fleet, registry=registry, load_delay_s=0.05, seed=7)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(standin: NomadStandin) -> nomad.Nomad:
    assert standin._server is not None
    return nomad.Nomad(host="127.0.0.1", port=standin._server.port, timeout=10)
