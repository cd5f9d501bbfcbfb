"""Embedded Consul stand-in: KV, blocking queries, sessions, txn, health/catalog, optional ACLs."""

from llm_scheduler_standins.consul.acl import ConsulACL, TokenSpec
from llm_scheduler_standins.consul.standin import ConsulStandin

__all__ = ["ConsulACL", "ConsulStandin", "TokenSpec"]
