"""Optional ACL mode: tokens with key-prefix rules, errors worded as acl/errors.go words them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from starlette.requests import Request

from llm_scheduler_standins.consul.httpkit import ConsulHTTPError

KeyPolicy = Literal["read", "write", "deny"]
ANONYMOUS_ACCESSOR = "00000000-0000-0000-0000-000000000002"


@dataclass(frozen=True)
class TokenSpec:
    accessor_id: str
    # Longest matching prefix wins; "" matches every key.
    key_prefix_rules: dict[str, KeyPolicy] = field(default_factory=dict)
    session_write: bool = False


@dataclass(frozen=True)
class ConsulACL:
    tokens: dict[str, TokenSpec]  # secret -> token
    # What a request without a token may do; by default nothing (default policy deny).
    anonymous: TokenSpec = field(default_factory=lambda: TokenSpec(ANONYMOUS_ACCESSOR))
    default_policy: Literal["allow", "deny"] = "deny"


@dataclass(frozen=True)
class Caller:
    """The token a request acts with; `acl is None` means ACLs are off and everything is allowed."""

    acl: ConsulACL | None
    token: TokenSpec | None
    anonymous: bool

    def key_policy(self, key: str) -> KeyPolicy:
        if self.acl is None or self.token is None:
            return "write"
        rules = self.token.key_prefix_rules
        matches = [prefix for prefix in rules if key.startswith(prefix)]
        if not matches:
            return "write" if self.acl.default_policy == "allow" else "deny"
        return rules[max(matches, key=len)]

    def can_read_key(self, key: str) -> bool:
        return self.key_policy(key) in ("read", "write")

    def can_write_key(self, key: str) -> bool:
        return self.key_policy(key) == "write"

    def can_write_prefix(self, prefix: str, existing_keys: list[str]) -> bool:
        """DELETE ?recurse needs write on the prefix and on every rule and key beneath it."""
        if not self.can_write_key(prefix):
            return False
        if self.acl is None or self.token is None:
            return True
        beneath = [p for p in self.token.key_prefix_rules if p.startswith(prefix)]
        return all(self.can_write_key(k) for k in beneath + existing_keys)

    def can_write_session(self) -> bool:
        if self.acl is None or self.token is None:
            return True
        return self.token.session_write or self.acl.default_policy == "allow"

    @property
    def filters_results(self) -> bool:
        """X-Consul-Results-Filtered-By-ACLs is only sent to non-anonymous tokens."""
        return self.acl is not None and not self.anonymous

    def denied(self, permission: str, resource: str) -> ConsulHTTPError:
        quoted = json.dumps(resource)
        if self.anonymous:
            return ConsulHTTPError(
                403,
                f"Permission denied: anonymous token lacks permission '{permission}' on {quoted}. "
                "The anonymous token is used implicitly when a request does not specify a token.",
            )
        accessor = self.token.accessor_id if self.token else ""
        return ConsulHTTPError(
            403,
            f"Permission denied: token with AccessorID '{accessor}' lacks permission "
            f"'{permission}' on {quoted}",
        )


def request_token(request: Request) -> str:
    """`?token=` beats `X-Consul-Token`, which beats `Authorization: Bearer`."""
    if request.query_params.get("token"):
        return request.query_params["token"]
    header = request.headers.get("x-consul-token", "")
    if header:
        return header
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return ""


def resolve_caller(acl: ConsulACL | None, request: Request) -> Caller:
    if acl is None:
        return Caller(None, None, anonymous=False)
    secret = request_token(request)
    if not secret:
        return Caller(acl, acl.anonymous, anonymous=True)
    token = acl.tokens.get(secret)
    if token is None:
        raise ConsulHTTPError(403, "ACL not found")
    return Caller(acl, token, anonymous=False)
