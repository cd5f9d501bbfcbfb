"""Fixtures for the service tests; helpers live in e2e_helpers.py."""

from __future__ import annotations

from e2e_helpers import cluster, service  # noqa: F401  (fixtures, re-exported for pytest)
