"""The Consul KV layout, in one place: nothing else spells a key (docs/kv-reference.md)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "llm-scheduler/"


@dataclass(frozen=True)
class KVLayout:
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            object.__setattr__(self, "prefix", self.prefix + "/")

    # Prefixes (end in "/") that the scheduler watches.
    @property
    def models(self) -> str:
        return self.prefix + "models/"

    @property
    def quotas(self) -> str:
        return self.prefix + "quotas/"

    @property
    def demand(self) -> str:
        return self.prefix + "demand/"

    @property
    def gateways(self) -> str:
        """Each gateway instance's demand: `gateways/<instance>`, one key per instance, held
        by the instance's Consul session (Behavior=delete: the key goes when it dies)."""
        return self.prefix + "gateways/"

    @property
    def status(self) -> str:
        return self.prefix + "status/"

    @property
    def nodes(self) -> str:
        return self.prefix + "nodes/"

    # Single keys.
    @property
    def settings(self) -> str:
        return self.prefix + "settings"

    @property
    def leader(self) -> str:
        return self.prefix + "leader"

    @property
    def holds(self) -> str:
        """The scheduler's own memory across restarts: holds and preempted-for marks."""
        return self.prefix + "state/holds"

    @property
    def time_to_ready(self) -> str:
        """What the scheduler learned of its models' start-to-ready times, warm and cold."""
        return self.prefix + "state/time-to-ready"

    @property
    def usage(self) -> str:
        """Each owner's decayed usage (docs/decision-core.md, rule F4), handed from pass to pass."""
        return self.prefix + "state/usage"

    @property
    def status_errors(self) -> str:
        return self.status + "_errors"

    def model_key(self, name: str) -> str:
        return self.models + name

    def quota_key(self, owner: str) -> str:
        return self.quotas + owner

    def demand_key(self, name: str) -> str:
        return self.demand + name

    def gateway_demand_key(self, instance: str) -> str:
        return self.gateways + instance

    def status_key(self, name: str) -> str:
        return self.status + name

    def written_by_scheduler(self, key: str) -> bool:
        """A key the scheduler writes itself: its state key and its status records."""
        return key in (self.holds, self.time_to_ready, self.usage) or key.startswith(self.status)

    def node_gpus_key(self, node_id: str) -> str:
        """Where the GPU reporter of one Nomad node writes its NVML view."""
        return f"{self.nodes}{node_id}/gpus"

    @staticmethod
    def tail(key: str, prefix: str) -> str:
        """The part of `key` after `prefix`: a model name, or an owner path for quotas."""
        if not key.startswith(prefix):
            raise ValueError(f"key {key!r} is not under {prefix!r}")
        return key[len(prefix) :]
