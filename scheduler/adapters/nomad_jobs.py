r"""The shape of the Nomad jobs the scheduler owns. Nothing else knows it.

A start renders the runtime's template (scheduler/data/jobspecs/<runtime>.nomad.hcl) through
Nomad's /v1/jobs/parse, then this module gives it its placement: one task group per shard
pinned to its node, a `device` block asking for exactly the planned instances, the node's
NodePool, the container's argv (scheduler/serving/argv.py), no deployments, a check grace
that covers the model's load, and the Meta that lets a restarted scheduler rebuild its
replicas from Nomad alone. A job without MODEL_META is not ours.

Rules of the real server this module follows (hashicorp/nomad, nomad/structs):
- Service.ValidateName (services.go): a service name matches
  `^(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])$`: service_name() sanitises.
- Job.Validate (structs.go): a job id has no space and no NUL: model names and replica ids
  are of a narrower alphabet already.
- UpdateStrategy.IsEmpty (structs.go) is `MaxParallel == 0`, and the reconciler creates no
  deployment for an empty strategy (scheduler/reconciler/reconcile_cluster.go
  createDeployment): no healthy_deadline/progress_deadline kills a replica still loading.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.adapters.interning import intern
from scheduler.adapters.model_cache_mount import DEFAULT_VOLUME, keep_model_cache
from scheduler.core.contract_base import EARLIEST, check_timestamp
from scheduler.core.models import Model, Node, Profile, Shard, StartAction, rfc3339
from scheduler.serving.argv import Wiring, shard_command

MODEL_META = "llm_scheduler_model"
PROFILE_META = "llm_scheduler_profile"
REPLICA_META = "llm_scheduler_replica"
CREATED_META = "llm_scheduler_created"
PREEMPTED_META = "llm_scheduler_preempted_for"
SHARD_META = "llm_scheduler_shard"
# Digest of what the replica runs: compared with the model's current one for rolling updates.
SPEC_META = "llm_scheduler_spec"
MHZ_PER_CORE = 1000


class JobShapeError(ValueError):
    """A planned start that cannot be written as a Nomad job (e.g. unknown device ids)."""


NS_PER_S = 1_000_000_000
# Nomad Service.ValidateName (nomad/structs/services.go), lower case as our names are.
SERVICE_NAME_RULE = re.compile(r"^(?:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")
_HASHED = re.compile(r"-h[0-9a-f]{8}$")
SERVICE_PREFIX = "llm-"
# Static rendezvous ports of multi-node replicas, outside Nomad's default dynamic range
# (20000-32000) so they never collide with a dynamic port.
RDZV_PORT_BASE = 40000
RDZV_PORT_SPAN = 10000


def job_id(model: str, replica: str) -> str:
    return f"llm-{model}-{replica}"


def service_name(model: str) -> str:
    """The Consul service of a model's replicas, legal by Nomad's rule and collision-free.

    `llm-<model>` when that is legal as is; otherwise (dots, underscores, too long) the name
    sanitised and cut, plus `-h` and 8 hex digits of the model name's SHA-256. A plain name
    that happens to end like a hash suffix is hashed too, so the two forms never meet.
    """
    plain = SERVICE_PREFIX + model
    if SERVICE_NAME_RULE.match(plain) and not _HASHED.search(plain):
        return plain
    digest = hashlib.sha256(model.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")
    base = base[: 63 - len(SERVICE_PREFIX) - 10].rstrip("-")
    return f"{SERVICE_PREFIX}{base}-h{digest}" if base else f"{SERVICE_PREFIX}h{digest}"


def spec_digest(model: Model, profile: Profile) -> str:
    """What a replica of `profile` runs, as a short digest: the serve spec (runtime, image,
    options, ...), the profile itself and the load grace. A change to any of them is a new
    digest, so the replica is rolled; the order of keys does not matter."""
    what = {
        # weights_gb and prefetch change nothing a replica runs.
        "serve": model.serve.model_dump(mode="json", exclude={"weights_gb", "prefetch"})
        if model.serve is not None
        else None,
        "profile": profile.model_dump(mode="json"),
        "load_grace_s": model.load_grace_s,
    }
    text = json.dumps(what, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def specs_of(models: list[Model]) -> dict[str, dict[str, str]]:
    """The snapshot's `specs`: per model and profile, the digest a replica started now has."""
    return {m.name: {p.name: spec_digest(m, p) for p in m.profiles} for m in models}


def template_variables(model: Model, image: str) -> str:
    """HCL variable assignments for /v1/jobs/parse (JSON strings are valid HCL strings).

    Only names the scheduler made (service name) and the image go through HCL; the catalog's
    values reach the job as JSON argv items after parsing, never as HCL text.
    """
    values = {"service_name": service_name(model.name), "image": image}
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def rendezvous_port(jid: str) -> int:
    digest = int(hashlib.sha256(jid.encode()).hexdigest()[:8], 16)
    return RDZV_PORT_BASE + digest % RDZV_PORT_SPAN


def _device_names(nodes: dict[str, Node], shard: Shard) -> str:
    node = nodes.get(shard.node)
    if node is None:
        raise JobShapeError(f"shard on unknown node {shard.node!r}")
    names: dict[str, str] = {}
    for gpu in node.gpus:
        names[gpu.id] = gpu.model
        for s in gpu.mig or []:
            names[s.id] = f"{gpu.model} MIG {s.profile}"
    wanted = {names.get(d) for d in shard.gpus}
    if None in wanted:
        raise JobShapeError(f"node {shard.node}: unknown device in {shard.gpus}")
    if len(wanted) != 1:
        raise JobShapeError(
            f"node {shard.node}: devices of several models {sorted(map(str, wanted))}"
        )
    return f"nvidia/gpu/{wanted.pop()}"


def _node_pool(nodes: dict[str, Node], shards: list[Shard]) -> str:
    pools = {nodes[sh.node].pool for sh in shards if sh.node in nodes}
    if len(pools) > 1:
        raise JobShapeError(f"shards in several node pools {sorted(pools)}: one job has one pool")
    return pools.pop() if pools else "default"


def _services_off(group: dict[str, Any]) -> None:
    group["Services"] = None
    for task in group.get("Tasks") or []:
        task["Services"] = None


def _load_grace(group: dict[str, Any], grace_ns: int) -> None:
    """check_restart's grace is the model's load_grace_s, whatever the template says: the
    health check may restart a replica only once the model has had that long to load."""
    services = list(group.get("Services") or [])
    for task in group.get("Tasks") or []:
        services += task.get("Services") or []
    for service in services:
        for holder in [service, *(service.get("Checks") or [])]:
            restart = holder.get("CheckRestart")
            if restart:
                holder["CheckRestart"] = {
                    **restart,
                    "Grace": grace_ns,
                }


def _host_network(group: dict[str, Any], task: dict[str, Any], rdzv: int) -> None:
    """Across nodes NCCL needs the host's network; the HTTP port is then the host port Nomad
    gave (no `to`), and the head reserves the rendezvous port so Nomad refuses a conflict."""
    task["Config"]["network_mode"] = "host"
    networks = group.get("Networks") or [{"Mode": "", "DynamicPorts": None, "ReservedPorts": None}]
    net = networks[0]
    net["Mode"] = "host"
    net["DynamicPorts"] = [{**p, "To": 0} for p in net.get("DynamicPorts") or []]
    if rdzv:
        reserved = [p for p in net.get("ReservedPorts") or [] if p.get("Label") != "rdzv"]
        net["ReservedPorts"] = [*reserved, {"Label": "rdzv", "Value": rdzv, "To": 0}]
    group["Networks"] = networks


def build_job(
    template: dict[str, Any],
    model: Model,
    action: StartAction,
    nodes: dict[str, Node],
    created_at: datetime,
    namespace: str | None = None,
    cache_volume: str = DEFAULT_VOLUME,
) -> dict[str, Any]:
    """The job to register for `action`, from the parsed template's first task group; each
    shard mounts the host volume `cache_volume` as its model cache where its node has it.

    JobShapeError for a placement that cannot be written; RenderError (a ValueError too)
    when the model's serve spec cannot be rendered.
    """
    profile = model.profile(action.profile)
    if profile is None:
        raise JobShapeError(f"model {model.name} has no profile {action.profile!r}")
    groups = template.get("TaskGroups") or []
    if not groups or not groups[0].get("Tasks"):
        raise JobShapeError("template has no task group with a task")
    job = copy.deepcopy(template)
    jid = job_id(model.name, action.replica)
    job.update(ID=jid, Name=jid)
    if namespace:
        job["Namespace"] = namespace
    job["NodePool"] = _node_pool(nodes, action.shards)
    if job.get("Update"):
        job["Update"] = {**job["Update"], "MaxParallel": 0}
    job["Meta"] = {
        **(template.get("Meta") or {}),
        MODEL_META: model.name,
        PROFILE_META: action.profile,
        REPLICA_META: action.replica,
        CREATED_META: rfc3339(created_at),
        SPEC_META: spec_digest(model, profile),
    }
    nnodes = len(action.shards)
    head = nodes.get(action.shards[0].node) if action.shards else None
    if nnodes > 1 and (head is None or not head.address):
        raise JobShapeError(
            f"node {action.shards[0].node}: no address (unique.network.ip-address) to wire "
            "the other shards to"
        )
    rdzv = rendezvous_port(jid) if nnodes > 1 else 0
    job["TaskGroups"] = [
        _shard_group(
            groups[0],
            model,
            profile,
            nodes,
            shard,
            Wiring(i, nnodes, head.address if head else "", rdzv),
            cache_volume,
        )
        for i, shard in enumerate(action.shards)
    ]
    return job


def _shard_group(
    template_group: dict[str, Any],
    model: Model,
    profile: Profile,
    nodes: dict[str, Node],
    shard: Shard,
    wiring: Wiring,
    cache_volume: str = DEFAULT_VOLUME,
) -> dict[str, Any]:
    """Task group `shard-<rank>`, pinned to its node, running its rank's argv on its devices."""
    i = wiring.rank
    group = copy.deepcopy(template_group)
    group["Name"] = f"shard-{i}"
    group["Count"] = 1
    group["Meta"] = {**(group.get("Meta") or {}), SHARD_META: str(i)}
    group["Update"] = {**(group.get("Update") or {}), "MaxParallel": 0}
    group["Constraints"] = [
        *(group.get("Constraints") or []),
        {"LTarget": "${node.unique.id}", "RTarget": shard.node, "Operand": "="},
    ]
    hold_on_drain(group)
    cmd = shard_command(model, profile, wiring)
    task = group["Tasks"][0]
    config = dict(task.get("Config") or {})
    config.pop("entrypoint", None)  # vLLM: the image's `vllm serve`; SGLang: none
    config.pop("command", None)
    if cmd.command:
        config["command"] = cmd.command
    config["args"] = cmd.args
    if "shm_size" not in config:
        # PyTorch workers (tensor parallel) share memory: Docker's 64 MB /dev/shm is too
        # small, so a template that sets neither gets the host's IPC namespace.
        config.setdefault("ipc_mode", "host")
    task["Config"] = config
    task["Env"] = {**(task.get("Env") or {}), **cmd.env}
    if wiring.nnodes > 1:
        _host_network(group, task, wiring.rdzv_port if i == 0 else 0)
    if not cmd.serves_http:
        _services_off(group)  # headless ranks: no HTTP server, no check to pass
    _load_grace(group, model.load_grace_s * NS_PER_S)
    keep_model_cache(group, nodes.get(shard.node), cache_volume)
    _resources(task, profile, _device_names(nodes, shard), shard)
    return group


def _resources(task: dict[str, Any], profile: Profile, device: str, shard: Shard) -> None:
    """The profile's CPU and memory, and exactly the shard's planned devices."""
    res = task.setdefault("Resources", {}) or {}
    task["Resources"] = res
    res["CPU"] = max(int(profile.cpu_cores * MHZ_PER_CORE), 100)
    res["MemoryMB"] = max(int(profile.memory_gb * 1024), 256)
    res["Devices"] = [
        {
            "Name": device,
            "Count": len(shard.gpus),
            "Constraints": [
                {
                    "LTarget": "${device.ids}",
                    "RTarget": ",".join(shard.gpus),
                    "Operand": "set_contains_any",
                }
            ],
        }
    ]


def hold_on_drain(group: dict[str, Any]) -> None:
    """`migrate { max_parallel = 0 }`: a drain leaves the shard's allocation running until its
    deadline (nomad/drainer/watch_jobs.go: numToDrain = healthy - (count - max_parallel)),
    so the scheduler can start the replacement elsewhere first and stop this one after
    (make-before-break). Nomad could not replace it anyway: the group is pinned to its node."""
    group["Migrate"] = {
        "MaxParallel": 0,
        "HealthCheck": "checks",
        "MinHealthyTime": 10 * 1_000_000_000,
        "HealthyDeadline": 300 * 1_000_000_000,
    }


# ------------------------------------------------------------------ reading jobs back


@dataclass(frozen=True)
class OwnedJob:
    job_id: str
    model: str
    profile: str
    replica: str
    created_at: datetime
    preempted_for: str | None
    stopped: bool  # deregistered (Stop) or dead
    wish: list[Shard]  # the placement the job asked for
    # Task groups with a service (and so a readiness check): a multi-node replica's head.
    checked_groups: frozenset[str] = field(default_factory=frozenset)
    spec: str = ""  # SPEC_META: empty for a job written before digests


def live_profiles(jobs: list[OwnedJob]) -> set[tuple[str, str]]:
    """(model, profile) of the jobs not stopped."""
    return {(j.model, j.profile) for j in jobs if not j.stopped}


def _parse_time(value: str | None) -> datetime:
    """CREATED_META; unreadable, without a zone or out of range: the epoch (an old replica)."""
    try:
        stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        if stamp.tzinfo is not None:
            return check_timestamp(stamp)
    except ValueError:
        pass
    return EARLIEST


def owned_job(job: dict[str, Any]) -> OwnedJob | None:
    """The scheduler's reading of a full job, or None for a job it did not create."""
    meta = job.get("Meta") or {}
    if not meta.get(MODEL_META) or not meta.get(REPLICA_META):
        return None
    wish: list[Shard] = []
    checked: set[str] = set()
    for group in job.get("TaskGroups") or []:
        if group.get("Services") or any(t.get("Services") for t in group.get("Tasks") or []):
            checked.add(str(group.get("Name")))
        node = next(
            (
                c.get("RTarget")
                for c in group.get("Constraints") or []
                if c.get("LTarget") == "${node.unique.id}"
            ),
            None,
        )
        ids: list[str] = []
        for task in group.get("Tasks") or []:
            for dev in (task.get("Resources") or {}).get("Devices") or []:
                for c in dev.get("Constraints") or []:
                    if c.get("LTarget") == "${device.ids}":
                        ids += [intern(x) for x in str(c.get("RTarget", "")).split(",") if x]
        if node:
            wish.append(Shard(node=intern(str(node)), gpus=ids))
    return OwnedJob(
        job_id=str(job["ID"]),
        # Interned, as node and device ids are (interning.py): looked up by name every pass.
        model=intern(str(meta[MODEL_META])),
        profile=intern(str(meta.get(PROFILE_META, ""))),
        replica=str(meta[REPLICA_META]),
        created_at=_parse_time(meta.get(CREATED_META)),
        preempted_for=meta.get(PREEMPTED_META) or None,
        stopped=bool(job.get("Stop")) or job.get("Status") == "dead",
        wish=wish,
        checked_groups=frozenset(checked),
        spec=str(meta.get(SPEC_META) or ""),
    )
