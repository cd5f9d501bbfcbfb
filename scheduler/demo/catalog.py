"""The demo's catalog: ten models of all three classes, owned by two tenants with quotas.

Sized against the stand-ins' built-in fleet (46 whole GPUs: 24 H100, 22 A100; plus 6 MIG
slices) so that the peak of the demand trace asks for more than there is.
"""

from __future__ import annotations

from scheduler.core.models import Amount, Model, Quota, Settings
from scheduler.serving.catalog_model import CatalogModel

TEAM_A = "acme/research"
TEAM_B = "acme/product"


# What each demo model serves (the stand-ins only pretend to run it).
SOURCES = {
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "qwen-2.5-32b": "Qwen/Qwen2.5-32B-Instruct",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "deepseek-coder-33b": "deepseek-ai/deepseek-coder-33b-instruct",
    "gemma-2-27b": "google/gemma-2-27b-it",
    "llama-3-405b-eval": "meta-llama/Llama-3.1-405B-Instruct",
    "finetune-eval-70b": "/models/finetune-eval-70b",
    "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct",
    "bge-embed": "BAAI/bge-large-en-v1.5",
}
SGLANG = {"qwen-2.5-32b", "deepseek-coder-33b"}


def _m(
    name: str, owner: str, cls: str, scaling: dict[str, object], *profiles: dict[str, object]
) -> Model:
    serve = {"source": SOURCES[name], "runtime": "sglang" if name in SGLANG else "vllm"}
    return CatalogModel.model_validate(
        {
            "name": name,
            "owner": owner,
            "class": cls,
            "scaling": scaling,
            "profiles": list(profiles),
            "serve": serve,
        }
    )


H100 = ["H100"]
A100 = ["A100"]

MODELS: list[Model] = [
    # critical: the product's chat models; their minimum is never taken.
    _m("llama-3-70b", TEAM_B, "critical", {"min": 1, "max": 4, "target_per_replica": 16},
       {"name": "tp4-h100", "gpus": 4, "gpu_models": H100, "cpu_cores": 16, "memory_gb": 160},
       {"name": "tp4-a100", "gpus": 4, "gpu_models": A100, "cpu_cores": 16, "memory_gb": 160}),
    # Scaled by its latency objective: the request target alone would keep it at
    # two replicas at its peak, where the queue pushes TTFT past 500 ms; a third meets it. Its
    # KV-cache target keeps the third while the load lasts: a met latency objective alone asks
    # for fewer again (latency is not linear in load), the KV usage of busy replicas does not.
    _m("qwen-2.5-32b", TEAM_B, "critical",
       {"min": 1, "max": 3, "target_per_replica": 32, "ttft_p90_ms": 500,
        "kv_cache_target": 0.95},
       {"name": "tp2", "gpus": 2, "gpu_memory_gb": 80, "cpu_cores": 8, "memory_gb": 96}),
    # standard
    _m("mixtral-8x7b", TEAM_A, "standard", {"min": 0, "max": 4, "target_per_replica": 12},
       {"name": "tp2", "gpus": 2, "gpu_memory_gb": 80, "cpu_cores": 8, "memory_gb": 128}),
    _m("llama-3-8b", TEAM_B, "standard", {"min": 1, "max": 4, "target_per_replica": 24},
       {"name": "one-gpu", "gpus": 1, "cpu_cores": 4, "memory_gb": 32},
       {"name": "mig-3g", "mig_profile": "3g.40gb", "cpu_cores": 4, "memory_gb": 32}),
    _m("deepseek-coder-33b", TEAM_A, "standard",
       {"min": 0, "max": 3, "target_per_replica": 8, "on_demand": True},
       {"name": "tp2", "gpus": 2, "gpu_memory_gb": 80, "cpu_cores": 8, "memory_gb": 96}),
    _m("gemma-2-27b", TEAM_B, "standard", {"min": 0, "max": 2, "target_per_replica": 12},
       {"name": "tp2", "gpus": 2, "cpu_cores": 8, "memory_gb": 96}),
    # opportunistic: batch work that fills idle GPUs and gives way at the peak.
    _m("llama-3-405b-eval", TEAM_A, "opportunistic", {"min": 0, "max": 1, "target_per_replica": 4},
       {"name": "tp8-pp2", "gpus": 8, "shards": 2, "gpu_models": H100, "cpu_cores": 32,
        "memory_gb": 512}),
    _m("finetune-eval-70b", TEAM_A, "opportunistic", {"min": 0, "max": 2, "target_per_replica": 4},
       {"name": "tp4", "gpus": 4, "cpu_cores": 16, "memory_gb": 160}),
    _m("phi-3-mini", TEAM_B, "opportunistic",
       {"min": 0, "max": 3, "target_per_replica": 32, "on_demand": True},
       {"name": "mig-1g", "mig_profile": "1g.10gb", "cpu_cores": 2, "memory_gb": 16},
       {"name": "mig-2g", "mig_profile": "2g.20gb", "cpu_cores": 2, "memory_gb": 16}),
    _m("bge-embed", TEAM_B, "opportunistic",
       {"min": 0, "max": 2, "target_per_replica": 64, "on_demand": True},
       {"name": "mig-1g", "mig_profile": "1g.10gb", "cpu_cores": 2, "memory_gb": 8}),
]  # fmt: skip

QUOTAS: list[Quota] = [
    Quota(owner="acme", guarantee=Amount(gpus=32), limit=Amount(gpus=52)),
    Quota(owner=TEAM_A, guarantee=Amount(gpus=12), limit=Amount(gpus=36)),
    Quota(owner=TEAM_B, guarantee=Amount(gpus=20), limit=Amount(gpus=40)),
]


def settings(speed: float) -> Settings:
    """The decision rules' clocks, shortened so that a two-minute demo shows them at work."""
    return Settings(
        eviction_grace_s=max(1, round(12 / speed)),
        min_lifetime_s=max(1, round(6 / speed)),
        preempt_hold_s=max(1, round(15 / speed)),
        max_victims=3,
        # 300 s in production; a demo minute is short, so a few seconds show the rule.
        scale_down_window_s=max(1, round(8 / speed)),
    )
