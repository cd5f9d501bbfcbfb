"""Placement plugins, in the manner of Nomad's feasibility/rank chain and the k8s framework.

A filter says why a node cannot hold one shard (or None when it can): a sentence, or a
`Status` (its words and whether preemption could help on that node: unschedulable, or not:
unresolvable, as kube-scheduler's Status); a plain sentence is unresolvable from a static
filter and unschedulable from a dynamic one. It may narrow the devices still in the running
by assigning a new list to `choice.gpus` (never mutating it).
A filter with `static = True` reads only the node's description (`node.node`) and the
profile, never what is free: the core runs those first, once per profile key and node shape
in a pass (per node when an extra static filter does not declare what it reads: `Keyed`),
on the node's healthy whole GPUs, and remembers the verdict and the narrowing (as Nomad
caches feasibility per computed node class). The others run on every visit, on the free
GPUs that survived the static narrowing. A filter's `name` is what plans count its "no"
under (`ProfileTrial.short`), its sentence what they say (`ProfileTrial.reasons`). A scorer
ranks a node with its chosen devices; higher is better. The dynamic filters and the scorers
form one chain per pass, built-ins first (chain.py: compiled, called natively), then the
extra ones, each called through this protocol. Extra plugins are passed to
`decide(snapshot, plugins)`; loading them from entry points is an adapter's job, never the
core's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from scheduler.core.inventory import NodeState
from scheduler.core.models import GPU, MigSlice, Model, Node, Profile
from scheduler.core.warmth import Warmth


@dataclass
class PlaceContext:
    model: Model
    profile: Profile


@dataclass(slots=True)
class Choice:
    """Devices still in the running on one node, narrowed by filters, then picked."""

    gpus: list[GPU]
    slice: MigSlice | None = None
    picked: list[str] = field(default_factory=list)


class Reason(NamedTuple):
    """Which filter said no (its `name`) and in which words: a dynamic filter may say
    different ones on different nodes ("no free 1g.10gb slice", "no free 3g.40gb slice").
    `unresolvable`: no preemption could change it on that node (else it is unschedulable:
    room that preemption frees could help), as kube-scheduler's Status codes say."""

    filter: str
    text: str
    unresolvable: bool = False


class Status(NamedTuple):
    """What a filter may answer instead of a plain sentence: its words, and whether
    preemption could help on the node (False: unschedulable) or not (True: unresolvable).
    A plain sentence is taken as unresolvable from a static filter, unschedulable from a
    dynamic one."""

    text: str
    unresolvable: bool = False


def reason_of(name: str, answer: object, static: bool) -> Reason | None:
    """A filter's answer as a Reason. A Status says itself whether preemption could help;
    a plain sentence (the older contract) is unresolvable from a static filter (it reads
    only what no preemption changes) and unschedulable from a dynamic one."""
    if answer is None:
        return None
    if isinstance(answer, Status):
        return Reason(name, answer.text, answer.unresolvable)
    return Reason(name, str(answer), static)


class Filter(Protocol):
    """A placement filter. `name` says which filter said no (the key of ProfileTrial counts;
    one per filter). `static` declares what it reads: True, only the node's description and
    the profile (asked once per node, or once per node shape and profile key when it is
    `Keyed`, docs/decision-core.md "Placement"); False, what is free now too (asked on every
    visit). Declared, never guessed: the adapter that loads third-party filters treats one
    that does not say as dynamic."""

    name: str
    static: bool

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | Status | None: ...


@runtime_checkable
class Keyed(Filter, Protocol):
    """A static filter that declares what it reads, so that alike nodes share its verdict.
    `shape_key(node)`: what it reads of the node beyond its shape (eligibility, and each
    device's model, memory and health); nodes of one shape and equal keys get one verdict.
    `profile_fields`: the Profile fields it reads (None: the model too, so its verdicts are
    kept per (model, profile)). It keeps or drops GPUs by model and memory only; a narrowing
    by anything else holds for its node alone. Declaring less than it reads changes plans."""

    profile_fields: tuple[str, ...] | None

    def shape_key(self, node: Node) -> Hashable: ...


class Scorer(Protocol):
    name: str

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float: ...


@dataclass
class Plugins:
    """Extra plugins run after the built-in ones (static filters before dynamic ones)."""

    filters: list[Filter] = field(default_factory=list)
    scorers: list[Scorer] = field(default_factory=list)


# ---------------------------------------------------------------- static filters


class NodeEligible:
    name = "eligibility"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        return None if node.node.eligible else "not eligible"


class DeviceHealth:
    name = "device-health"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        if node.node.gpus and all(
            not g.healthy or (g.mig is not None and not any(s.healthy for s in g.mig))
            for g in node.node.gpus
        ):
            return "no healthy devices"
        return None


def model_matches(profile: Profile, gpu_model: str) -> bool:
    """A profile's `gpu_models` are substrings of the product name (`H100` matches
    `NVIDIA H100 80GB HBM3`); none listed matches any."""
    wanted = profile.gpu_models
    return not wanted or any(w in gpu_model for w in wanted)


def memory_suffices(profile: Profile, memory_gb: float) -> bool:
    need = profile.gpu_memory_gb
    return need is None or memory_gb + 1e-9 >= need


class GPUModelMatch:
    """Whole GPUs whose product name contains one of the profile's `gpu_models`."""

    name = "gpu-model"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        p = ctx.profile
        if p.is_mig or not p.gpu_models:
            return None
        choice.gpus = [g for g in choice.gpus if model_matches(p, g.model)]
        if not choice.gpus and not any(
            model_matches(p, g.model) for g in node.node.gpus if g.mig is None
        ):
            return "no matching GPU model"
        return None


class GPUMemory:
    name = "gpu-memory"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        p = ctx.profile
        if p.is_mig or p.gpu_memory_gb is None:
            return None
        before = len(choice.gpus)
        choice.gpus = [g for g in choice.gpus if memory_suffices(p, g.memory_gb)]
        if before >= ctx.profile.gpus > len(choice.gpus):
            return "too little GPU memory"
        return None


def default_filters(warmth: Warmth | None = None) -> list[Filter]:
    """The built-in filters, static ones first; the dynamic ones are compiled (chain.py).
    `warmth`: the pass's model caches (none known: the cache-room filter never says no)."""
    from scheduler.core.chain import CacheRoom, GPUCount, MigProfile, NodeResources

    return [
        NodeEligible(),
        DeviceHealth(),
        GPUModelMatch(),
        GPUMemory(),
        NodeResources(),
        MigProfile(),
        GPUCount(),
        CacheRoom(warmth or Warmth()),
    ]


def default_scorers(warmth: Warmth | None = None) -> list[Scorer]:
    """The built-in scorers, compiled (chain.py): bin-packing, NVLink locality, spread, and
    the warm cache (`warmth`: the pass's model caches; none known, it prefers no node)."""
    from scheduler.core.chain import BinPacking, NVLinkLocality, SpreadReplicas, WarmCache

    return [BinPacking(), NVLinkLocality(), SpreadReplicas(), WarmCache(warmth or Warmth())]
