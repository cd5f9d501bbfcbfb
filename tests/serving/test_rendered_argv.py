"""Rendered jobs follow each runtime's real CLI, for every profile shape.

Facts: /work/shared/reference/serving-runtimes.md (sections 1-5); every flag is checked against
the flag lists dumped from the released parsers (shared fixtures/runtimes/*-flags.txt).
"""

from __future__ import annotations

from typing import Any

import pytest
from serving_helpers import SHAPES, fixture_flags, model, render

from scheduler.serving.argv import RenderError, Wiring, shard_command

RUNTIMES = ("vllm", "sglang")
SHELL = set(";|&`$<>(){}'\"\\\n\t ")


def _task(job: dict[str, Any], shard: int = 0) -> dict[str, Any]:
    task: dict[str, Any] = job["TaskGroups"][shard]["Tasks"][0]
    return task


def _value(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} appears {args.count(flag)} times in {args}"
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_rendered_flag_is_one_the_runtime_accepts(runtime: str, shape: str) -> None:
    job = render(
        runtime,
        shape,
        revision="main",
        options={
            "context_length": 8192,
            "dtype": "bfloat16",
            "quantization": "fp8",
            "gpu_memory_fraction": 0.9,
            "max_concurrent_sequences": 128,
            "trust_remote_code": True,
        },
    )
    known = fixture_flags(runtime)
    for i in range(len(job["TaskGroups"])):
        args = _task(job, i)["Config"]["args"]
        assert all(isinstance(a, str) for a in args)
        flags = [a for a in args if a.startswith("--")]
        assert flags and set(flags) <= known, set(flags) - known
        # Nothing through a shell: no /bin/sh, no -c, no shell characters in any item except
        # Nomad's own ${NOMAD_PORT_http} / ${attr...} interpolations, which the scheduler writes.
        config = _task(job, i)["Config"]
        assert config.get("command") in (None, "python3")
        assert "-c" not in args and "/bin/sh" not in str(config)
        for arg in args:
            if not arg.startswith("${"):
                assert not (set(arg) & SHELL), arg


@pytest.mark.parametrize("shape", list(SHAPES))
def test_vllm_keeps_the_image_entrypoint_and_puts_the_model_first(shape: str) -> None:
    job = render("vllm", shape)
    config = _task(job)["Config"]
    assert "command" not in config and "entrypoint" not in config  # ENTRYPOINT vllm serve
    args = config["args"]
    assert args[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "serve" not in args and "vllm" not in args
    assert _value(args, "--served-model-name") == "llama-3.1-8b"
    assert _value(args, "--port") == "${NOMAD_PORT_http}"
    # The API server gives up on engines not ready in 600 s by default: raise it to the grace.
    assert _task(job)["Env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "2400"
    profile, shards = SHAPES[shape]
    # Tensor parallel per node, pipeline parallel across nodes.
    assert _value(args, "--tensor-parallel-size") == str(profile.get("gpus", 1))
    if len(shards) == 1:
        assert "--pipeline-parallel-size" not in args and "--nnodes" not in args


@pytest.mark.parametrize("shape", list(SHAPES))
def test_sglang_runs_launch_server_with_model_path_on_all_interfaces(shape: str) -> None:
    job = render("sglang", shape)
    config = _task(job)["Config"]
    assert config["command"] == "python3"
    args = config["args"]
    assert args[:2] == ["-m", "sglang.launch_server"]
    assert _value(args, "--model-path") == "meta-llama/Llama-3.1-8B-Instruct"
    assert _value(args, "--host") == "0.0.0.0"  # its default is 127.0.0.1
    assert "--enable-metrics" in args  # off by default in SGLang
    profile, shards = SHAPES[shape]
    # --tp-size counts GPUs over all nodes.
    assert _value(args, "--tp-size") == str(profile.get("gpus", 1) * len(shards))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_options_become_the_runtime_spelling_as_separate_items(runtime: str) -> None:
    opts = {
        "context_length": 32768,
        "dtype": "bfloat16",
        "quantization": "awq",
        "gpu_memory_fraction": 0.85,
        "max_concurrent_sequences": 64,
        "trust_remote_code": True,
    }
    args = _task(render(runtime, "tp4", revision="v1.0", options=opts))["Config"]["args"]
    names = {
        "vllm": ("--max-model-len", "--gpu-memory-utilization", "--max-num-seqs"),
        "sglang": ("--context-length", "--mem-fraction-static", "--max-running-requests"),
    }[runtime]
    assert _value(args, names[0]) == "32768"
    assert _value(args, names[1]) == "0.85"
    assert _value(args, names[2]) == "64"
    assert _value(args, "--dtype") == "bfloat16"
    assert _value(args, "--quantization") == "awq"
    assert _value(args, "--revision") == "v1.0"
    assert "--trust-remote-code" in args


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_extra_args_are_appended_as_separate_items(runtime: str) -> None:
    extra = {
        "vllm": {"--enforce-eager": True, "--seed": 7},
        "sglang": {"--disable-radix-cache": True, "--random-seed": 7},
    }[runtime]
    args = _task(render(runtime, "one-gpu", extra_args=extra))["Config"]["args"]
    for flag, value in extra.items():
        assert flag in args
        if value is not True:
            assert _value(args, flag) == str(value)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_flag_the_runtime_does_not_have_is_refused_at_render(runtime: str) -> None:
    # A Model that skipped the catalog's check (e.g. built in code) still cannot render one.
    m = model(runtime, "one-gpu", extra_args={"--hf-model": "x"})
    with pytest.raises(RenderError, match=r"serve.extra_args.--hf-model: not a flag"):
        shard_command(m, m.profiles[0], Wiring())
    m = model(runtime, "one-gpu", extra_args={"--port": 9})
    with pytest.raises(RenderError, match=r"--port: set by the scheduler"):
        shard_command(m, m.profiles[0], Wiring())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_tensor_parallel_gets_shared_memory_and_the_ulimits(runtime: str) -> None:
    config = _task(render(runtime, "tp8"))["Config"]
    assert config["ipc_mode"] == "host"
    assert config["ulimit"] == [{"memlock": "-1", "stack": "67108864"}]


def test_vllm_two_nodes_wire_to_the_head_without_ray() -> None:
    job = render("vllm", "2-node")
    head, other = (_task(job, i)["Config"]["args"] for i in (0, 1))
    for rank, args in enumerate((head, other)):
        assert _value(args, "--tensor-parallel-size") == "8"  # per node
        assert _value(args, "--pipeline-parallel-size") == "2"
        assert _value(args, "--nnodes") == "2"
        assert _value(args, "--node-rank") == str(rank)
        assert _value(args, "--master-addr") == "10.0.0.1"  # the head node's address
        assert _value(args, "--distributed-executor-backend") == "mp"
    assert _value(head, "--master-port") == _value(other, "--master-port")
    assert "--headless" not in head and "--headless" in other
    # Each node tells vLLM its own address (Nomad interpolates the node attribute).
    assert _task(job, 1)["Env"]["VLLM_HOST_IP"] == "${attr.unique.network.ip-address}"


def test_sglang_two_nodes_wire_to_the_head() -> None:
    job = render("sglang", "2-node")
    port = job["TaskGroups"][0]["Networks"][0]["ReservedPorts"][0]["Value"]
    for rank in (0, 1):
        args = _task(job, rank)["Config"]["args"]
        assert _value(args, "--tp-size") == "16"
        assert _value(args, "--nnodes") == "2"
        assert _value(args, "--node-rank") == str(rank)
        assert _value(args, "--dist-init-addr") == f"10.0.0.1:{port}"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_multi_node_uses_host_networking_and_reserves_the_rendezvous_port(runtime: str) -> None:
    job = render(runtime, "2-node")
    head, other = job["TaskGroups"]
    for group in (head, other):
        assert group["Tasks"][0]["Config"]["network_mode"] == "host"
        net = group["Networks"][0]
        assert net["Mode"] == "host"
        # The HTTP port is the host port Nomad gives (no `to`), which ${NOMAD_PORT_http} names.
        assert all(p["To"] == 0 for p in net["DynamicPorts"] or [])
    (rdzv,) = head["Networks"][0]["ReservedPorts"]
    assert rdzv["Label"] == "rdzv" and 40000 <= rdzv["Value"] < 50000  # outside 20000-32000
    assert not other["Networks"][0].get("ReservedPorts")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_only_the_head_shard_serves_http_and_has_a_check(runtime: str) -> None:
    job = render(runtime, "2-node")
    head, other = job["TaskGroups"]
    assert head["Tasks"][0]["Services"][0]["Checks"]
    assert not other.get("Services") and not other["Tasks"][0].get("Services")


def test_a_multi_node_replica_needs_the_head_address() -> None:
    m = model("vllm", "2-node")
    with pytest.raises(RenderError, match="head shard"):
        shard_command(m, m.profiles[0], Wiring(rank=1, nnodes=2))


def test_a_template_without_shared_memory_settings_gets_host_ipc() -> None:
    from serving_helpers import NOW, SHAPES, nodes

    from scheduler.adapters.nomad_jobs import build_job
    from scheduler.core.models import StartAction

    m = model("vllm", "tp4")
    bare = {"ID": "llm", "TaskGroups": [{"Name": "s", "Tasks": [{"Name": "t", "Config": {}}]}]}
    action = StartAction(model=m.name, profile="tp4", replica="r", shards=SHAPES["tp4"][1],
                         reason="")  # fmt: skip
    job = build_job(bare, m, action, nodes(), NOW)
    assert job["TaskGroups"][0]["Tasks"][0]["Config"]["ipc_mode"] == "host"
    sized = {
        **bare,
        "TaskGroups": [{"Name": "s", "Tasks": [{"Name": "t", "Config": {"shm_size": 2**34}}]}],
    }
    job = build_job(sized, m, action, nodes(), NOW)
    assert "ipc_mode" not in job["TaskGroups"][0]["Tasks"][0]["Config"]
