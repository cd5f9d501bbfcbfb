"""Embedded Consul stand-in: KV, blocking queries, sessions, txn, health/catalog, optional ACLs."""

from scheduler.standins.consul.acl import ConsulACL, TokenSpec
from scheduler.standins.consul.standin import ConsulStandin

__all__ = ["ConsulACL", "ConsulStandin", "TokenSpec"]
