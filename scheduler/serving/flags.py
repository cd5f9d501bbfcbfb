"""Every long flag each runtime accepts, from the lists shipped in scheduler/data/runtimes/.

The lists were dumped from the released parsers (vLLM v0.34.0 `vllm serve`, SGLang v0.5.23
`python -m sglang.launch_server`; see tests/serving/test_flag_lists.py for their provenance).
A catalog's extra flag is accepted only when its runtime lists it, and only when it is not
one the scheduler sets itself or a typed option stands for.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

FLAG_FILES = {"vllm": "vllm-serve-flags.txt", "sglang": "sglang-launch-server-flags.txt"}

# Flags the rendered argv sets from the profile, the placement or the serve object: an extra
# flag may not override them (the value would fight the placement, or the typed option).
SCHEDULER_FLAGS: dict[str, dict[str, str]] = {
    "vllm": {
        "--model": "serve.source",
        "--served-model-name": "the model's name",
        "--host": "the scheduler",
        "--port": "the scheduler",
        "--revision": "serve.revision",
        "--tensor-parallel-size": "the profile",
        "--pipeline-parallel-size": "the profile",
        "--nnodes": "the profile",
        "--node-rank": "the placement",
        "--master-addr": "the placement",
        "--master-port": "the placement",
        "--headless": "the placement",
        "--distributed-executor-backend": "the profile",
        "--data-parallel-size": "the profile",
        "--max-model-len": "serve.options.context_length",
        "--dtype": "serve.options.dtype",
        "--quantization": "serve.options.quantization",
        "--gpu-memory-utilization": "serve.options.gpu_memory_fraction",
        "--max-num-seqs": "serve.options.max_concurrent_sequences",
        "--trust-remote-code": "serve.options.trust_remote_code",
        "--no-trust-remote-code": "serve.options.trust_remote_code",
    },
    "sglang": {
        "--model-path": "serve.source",
        "--model": "serve.source",
        "--served-model-name": "the model's name",
        "--host": "the scheduler",
        "--port": "the scheduler",
        "--revision": "serve.revision",
        "--tp-size": "the profile",
        "--tensor-parallel-size": "the profile",
        "--pp-size": "the profile",
        "--pipeline-parallel-size": "the profile",
        "--nnodes": "the profile",
        "--node-rank": "the placement",
        "--dist-init-addr": "the placement",
        "--nccl-init-addr": "the placement",
        "--dp-size": "the profile",
        "--data-parallel-size": "the profile",
        "--context-length": "serve.options.context_length",
        "--dtype": "serve.options.dtype",
        "--quantization": "serve.options.quantization",
        "--mem-fraction-static": "serve.options.gpu_memory_fraction",
        "--max-running-requests": "serve.options.max_concurrent_sequences",
        "--trust-remote-code": "serve.options.trust_remote_code",
        "--enable-metrics": "the scheduler",
    },
}


@cache
def known_flags(runtime: str) -> frozenset[str]:
    """The runtime's long flags; empty for a runtime without a shipped list."""
    name = FLAG_FILES.get(runtime)
    if name is None:
        return frozenset()
    text = (resources.files("scheduler") / "data" / "runtimes" / name).read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip().startswith("--"))


def flag_problems(runtime: str, flags: list[str]) -> list[tuple[str, str]]:
    """(flag, why) for each extra flag the runtime would refuse or the scheduler owns."""
    known = known_flags(runtime)
    owned = SCHEDULER_FLAGS.get(runtime, {})
    problems: list[tuple[str, str]] = []
    for flag in flags:
        if flag in owned:
            problems.append((flag, f"set by {owned[flag]}, not by extra_args"))
        elif flag not in known:
            problems.append((flag, f"not a flag of {runtime} (see scheduler/data/runtimes/)"))
    return problems
