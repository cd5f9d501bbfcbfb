"""Optional Nomad ACLs: tokens with namespace capabilities and node read/write.

Without an `NomadACL` the stand-in behaves like a server with ACLs disabled. With one,
a missing token is the anonymous token (no rights unless given), an unknown one is
`ACL token not found`, a token without the capability is `Permission denied`.
"""

from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

READ = frozenset({"list-jobs", "parse-job", "read-job", "read-job-scaling", "read-logs", "read-fs"})
WRITE = READ | frozenset(
    {"submit-job", "dispatch-job", "alloc-lifecycle", "scale-job", "submit-recommendation"}
)
PERMISSION_DENIED = "Permission denied"
TOKEN_NOT_FOUND = "ACL token not found"


@dataclass(frozen=True)
class NomadToken:
    secret_id: str
    name: str = ""
    management: bool = False
    # namespace name or glob -> capabilities (use READ / WRITE for the policy shorthands)
    namespaces: dict[str, frozenset[str]] = field(default_factory=dict)
    node: str = ""  # "", "read" or "write"
    accessor_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def allows(self, capability: str, namespace: str) -> bool:
        if self.management:
            return True
        exact = self.namespaces.get(namespace)
        if exact is not None:
            return capability in exact
        globbed = [p for p in self.namespaces if fnmatch.fnmatchcase(namespace, p)]
        if not globbed:
            return False
        # The closest glob wins, as in Nomad: the longest pattern.
        return capability in self.namespaces[max(globbed, key=len)]

    def allows_any(self, capability: str) -> bool:
        """`?namespace=*`: allowed when some namespace grants it (acl.go anyNamespaceAllowsOp)."""
        return self.management or any(capability in caps for caps in self.namespaces.values())

    def allows_node(self, write: bool) -> bool:
        if self.management:
            return True
        return self.node == "write" or (self.node == "read" and not write)


class NomadACL:
    def __init__(self, tokens: Iterable[NomadToken] = (), anonymous: NomadToken | None = None):
        self._tokens = {t.secret_id: t for t in tokens}
        self.anonymous = anonymous or NomadToken(secret_id="anonymous", name="Anonymous Token")

    def add(self, token: NomadToken) -> None:
        self._tokens[token.secret_id] = token

    def token(self, secret: str | None) -> NomadToken | None:
        if not secret:
            return self.anonymous
        return self._tokens.get(secret)

    def check_namespace(self, secret: str | None, capability: str, namespace: str) -> str | None:
        """None when allowed, else the error text to answer with 403."""
        token = self.token(secret)
        if token is None:
            return TOKEN_NOT_FOUND
        return None if token.allows(capability, namespace) else PERMISSION_DENIED

    def check_node(self, secret: str | None, *, write: bool = False) -> str | None:
        token = self.token(secret)
        if token is None:
            return TOKEN_NOT_FOUND
        return None if token.allows_node(write) else PERMISSION_DENIED
