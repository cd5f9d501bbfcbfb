"""POST /v1/jobs/parse: HCL2 jobspecs with variables, as llm-scheduler's templates use them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from nomad_helpers import by_name, devices_of, fixture

import nomad
from llm_scheduler_standins.conformance import assert_same_shape
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import Node

SAMPLE = (Path(__file__).parent / "vllm_sample.nomad.hcl").read_text()


def _parse(
    standin: NomadStandin, hcl: str, variables: str = "", canonicalize: bool = True
) -> httpx.Response:
    assert standin._server is not None
    return httpx.post(
        f"{standin._server.url}/v1/jobs/parse",
        json={"JobHCL": hcl, "Canonicalize": canonicalize, "Variables": variables},
    )


def test_documented_parse_request(standin: NomadStandin, client: nomad.Nomad) -> None:
    request = fixture("jobs-parse-request.json")
    job = client.jobs.parse(request["JobHCL"], request["Canonicalize"])
    assert_same_shape(job, fixture("jobs-parse-response.json"), null_matches_any=True)
    assert job["ID"] == "example" and job["Type"] == "service"
    assert [g["Name"] for g in job["TaskGroups"]] == ["cache"]


def test_vllm_jobspec_with_variables(standin: NomadStandin) -> None:
    variables = 'node_id = "abc"\nmodel = "qwen-7b"\ngpus = 4'
    job = _parse(standin, SAMPLE, variables).json()
    assert job["Meta"] == {"llm-scheduler.model": "qwen-7b", "llm-scheduler.replica": "r-1"}
    (group,) = job["TaskGroups"]
    assert group["Constraints"] == [
        {"LTarget": "${node.unique.id}", "RTarget": "abc", "Operand": "="}
    ]
    assert group["Networks"][0]["DynamicPorts"][0] == {
        "Label": "http",
        "Value": 0,
        "To": 8000,
        "HostNetwork": "default",
    }
    (service,) = group["Services"]
    assert (service["Name"], service["PortLabel"]) == ("llm-qwen-7b", "http")
    assert service["Tags"] == ["llm", "model=qwen-7b"]
    assert service["Checks"][0]["Interval"] == 10 * 10**9
    assert group["RestartPolicy"]["Interval"] == 300 * 10**9
    (task,) = group["Tasks"]
    assert task["Config"]["args"] == ["--model", "qwen-7b", "--tensor-parallel-size", 4]
    assert task["Env"]["ALLOC"] == "${NOMAD_ALLOC_ID}"  # runtime variables stay for Nomad
    resources = task["Resources"]
    assert (resources["CPU"], resources["MemoryMB"]) == (8000, 65536)
    assert resources["Devices"] == [
        {
            "Name": "nvidia/gpu",
            "Count": 4,
            "Constraints": [
                {"LTarget": "${device.attr.memory}", "RTarget": "40 GiB", "Operand": ">="}
            ],
            "Affinities": None,
        }
    ]
    assert "MODEL=qwen-7b" in task["Templates"][0]["EmbeddedTmpl"]
    assert '{{ env "NVIDIA_VISIBLE_DEVICES" }}' in task["Templates"][0]["EmbeddedTmpl"]


def test_parsed_job_registers_and_places(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-3")
    job = _parse(standin, SAMPLE, f'node_id = "{node.id}"').json()
    job["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"][0]["Constraints"].append(
        {
            "LTarget": "${device.ids}",
            "RTarget": f"{node.gpus[2].id},{node.gpus[4].id}",
            "Operand": "set_contains",
        }
    )
    client.jobs.register_job({"Job": job})
    (alloc,) = client.job.get_allocations("llm")
    assert sorted(devices_of(client, alloc["ID"])) == sorted([node.gpus[2].id, node.gpus[4].id])


def test_without_canonicalize_defaults_stay_null(standin: NomadStandin) -> None:
    job = _parse(standin, SAMPLE, 'node_id = "x"', canonicalize=False).json()
    assert job["Namespace"] is None and job["Region"] is None
    assert job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] is None


@pytest.mark.parametrize(
    ("hcl", "variables", "needle"),
    [
        ('job "x" {\n  group "g" {\n', "", "Failed to parse job: input.hcl"),
        (SAMPLE, "", 'Unset variable "node_id"'),
        (SAMPLE, 'node_id = "a"\nbogus = 1', 'Undefined variable: A "bogus" variable'),
        ('job "x" {\n  group "g" {\n    cont = 1\n  }\n}', "", 'An argument named "cont"'),
        (
            'job "x" {\n  group "g" {\n    task "t" {\n      resources {\n        memroy = 1\n'
            "      }\n    }\n  }\n}",
            "",
            'argument named "memroy"',
        ),
        ('job "x" {\n  group "g" {\n    count = var.n\n  }\n}', "", "var.n"),
        (
            'variable "d" {\n  default = "5"\n}\njob "x" {\n  group "g" {\n    restart {\n'
            '      delay = "five"\n    }\n  }\n}',
            "",
            'invalid duration "five"',
        ),
    ],
)
def test_parse_errors_are_400(standin: NomadStandin, hcl: str, variables: str, needle: str) -> None:
    answer = _parse(standin, hcl, variables)
    assert answer.status_code == 400
    assert answer.text.startswith("Failed to parse job: ")
    assert needle in answer.text


def test_escapes_and_literal_interpolation(standin: NomadStandin) -> None:
    hcl = (
        'job "x" {\n  group "g" {\n    task "t" {\n      driver = "docker"\n'
        '      env {\n        A = "say \\"hi\\"\\n"\n        B = "$${literal}"\n'
        '        C = "${attr.unique.hostname}"\n      }\n    }\n  }\n}\n'
    )
    env = _parse(standin, hcl).json()["TaskGroups"][0]["Tasks"][0]["Env"]
    assert env == {"A": 'say "hi"\n', "B": "${literal}", "C": "${attr.unique.hostname}"}


def test_gpu_reporter_system_job_runs_on_every_gpu_node(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    spec = Path(__file__).resolve().parents[3] / "jobspecs" / "gpu-reporter.nomad.hcl"
    if not spec.exists():
        pytest.skip("jobspecs/gpu-reporter.nomad.hcl is not in this checkout")
    job = client.jobs.parse(spec.read_text(), True)
    assert job["Type"] == "system"
    client.jobs.register_job({"Job": job})
    allocs = client.job.get_allocations(job["ID"])
    assert sorted(a["NodeID"] for a in allocs) == sorted(n.id for n in fleet)
    client.jobs.register_job({"Job": job})  # the same spec again places nothing new
    assert {a["ID"] for a in client.job.get_allocations(job["ID"])} == {a["ID"] for a in allocs}
