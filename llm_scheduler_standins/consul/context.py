"""What every route needs: the store, the ACL table and the blocking settings."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from llm_scheduler_standins.consul.acl import Caller, ConsulACL, resolve_caller
from llm_scheduler_standins.consul.httpkit import BlockingParams, blocking_params
from llm_scheduler_standins.consul.store import ConsulStore

KV_MAX_VALUE_SIZE = 512 * 1024  # raft.SuggestedMaxDataSize, Consul's kv_max_value_size default
DATACENTER = "dc1"


@dataclass
class RouteContext:
    store: ConsulStore
    acl: ConsulACL | None
    max_wait_s: float
    jitter: bool

    def caller(self, request: Request) -> Caller:
        return resolve_caller(self.acl, request)

    def blocking(self, request: Request) -> BlockingParams:
        return blocking_params(request, max_wait_s=self.max_wait_s, jitter=self.jitter)

    def acl_headers(self) -> dict[str, str]:
        if self.acl is None:
            return {}
        return {"X-Consul-Default-ACL-Policy": self.acl.default_policy}
