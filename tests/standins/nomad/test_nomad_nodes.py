"""Nodes as the NVIDIA device plugin fingerprints them, read through python-nomad."""

from __future__ import annotations

from typing import Any

from nomad_helpers import by_name, fixture

import nomad
from llm_scheduler_standins.conformance import assert_same_shape
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import Node


def _generic_drivers(documented: dict[str, Any]) -> None:
    """Driver attribute names are data (they vary by driver and version), not shape."""
    documented["Drivers"].pop("rkt")  # the rkt driver left Nomad in 0.11
    for driver in documented["Drivers"].values():
        if driver["Attributes"] is not None:
            driver["Attributes"] = {}


def test_node_list_matches_documented_shape(client: nomad.Nomad) -> None:
    nodes = client.nodes.get_nodes()
    assert len(nodes) == 6
    documented = fixture("nodes-list.json")[0]
    documented.pop("Attributes")  # only with ?os=true
    _generic_drivers(documented)
    for node in nodes:
        assert_same_shape(node, documented, null_matches_any=True)
        assert "NodeResources" not in node


def test_node_list_resources_and_os(client: nomad.Nomad) -> None:
    nodes = client.nodes.get_nodes(resources=True, os=True)
    assert all(n["NodeResources"]["Devices"] for n in nodes)
    assert all(n["Attributes"]["os.name"] for n in nodes)


def test_node_read_matches_documented_shape(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = client.node.get_node(by_name(fleet, "gpu-h100-1").id)
    documented = fixture("node-read.json")
    _generic_drivers(documented)
    # Sample host volumes and networks of the doc's node; ours have none configured.
    documented["HostVolumes"] = documented["HostNetworks"] = None
    documented["LastDrain"] = None  # our nodes were never drained
    for attr in ("driver.mock_driver", "driver.raw_exec"):  # drivers our nodes do not run
        documented["Attributes"].pop(attr)
    # The doc's node is a skeleton-device demo: compare our NVIDIA groups to its shape only.
    documented["NodeResources"]["Devices"][0]["Attributes"] = {}
    assert_same_shape(node, documented, null_matches_any=True)
    assert len(node["ID"]) == 36
    assert node["Status"] == "ready" and node["SchedulingEligibility"] == "eligible"
    assert node["Attributes"]["unique.hostname"] == "gpu-h100-1"
    cpu = node["NodeResources"]["Cpu"]
    assert cpu["TotalCpuCores"] == 192 and cpu["CpuShares"] > 0
    assert node["NodeResources"]["Memory"]["MemoryMB"] == 2048 * 1024


def test_whole_gpus_form_one_group_per_model(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = client.node.get_node(by_name(fleet, "gpu-h100-1").id)
    (group,) = node["NodeResources"]["Devices"]
    assert (group["Vendor"], group["Type"], group["Name"]) == (
        "nvidia",
        "gpu",
        "NVIDIA H100 80GB HBM3",
    )
    ids = [i["ID"] for i in group["Instances"]]
    assert len(ids) == 8 and len(set(ids)) == 8 and all(i.startswith("GPU-") for i in ids)
    attrs = group["Attributes"]
    assert attrs["memory"] == {"Int": 80 * 1024, "Unit": "MiB"}
    assert attrs["power"]["Unit"] == "W" and attrs["bar1"]["Unit"] == "MiB"
    assert attrs["cores_clock"]["Unit"] == "MHz" and attrs["memory_clock"]["Unit"] == "MHz"
    assert attrs["pci_bandwidth"]["Unit"] == "MB/s"
    assert attrs["display_state"] == {"String": "0"}
    assert attrs["persistence_mode"] == {"String": "1"}
    assert attrs["driver_version"]["String"].count(".") == 2
    for instance in group["Instances"]:
        bus = instance["Locality"]["PciBusID"]
        assert len(bus) == 32 and bus.endswith("\0") and bus.startswith("00000000:")
        assert instance["Healthy"] is True and instance["HealthDescription"] == ""


def test_mig_gpu_shows_only_its_slices(client: nomad.Nomad, fleet: list[Node]) -> None:
    fleet_node = by_name(fleet, "gpu-a100-mig-1")
    node = client.node.get_node(fleet_node.id)
    groups = {g["Name"]: g for g in node["NodeResources"]["Devices"]}
    assert set(groups) == {
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "NVIDIA A100-SXM4-80GB MIG 2g.20gb",
        "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
    }
    whole = [i["ID"] for i in groups["NVIDIA A100-SXM4-80GB"]["Instances"]]
    mig_parents = [g.id for g in fleet_node.gpus if g.mig is not None]
    assert len(whole) == 6 and not set(mig_parents) & set(whole)
    three_g = groups["NVIDIA A100-SXM4-80GB MIG 3g.40gb"]
    assert len(three_g["Instances"]) == 3
    assert all(i["ID"].startswith("MIG-") for i in three_g["Instances"])
    assert three_g["Attributes"]["memory"] == {"Int": 40 * 1024, "Unit": "MiB"}
    # Slices share their parent's PCI bus id; shape as in the plugin's real output.
    excerpt = fixture("node-devices-nvidia-mig-excerpt.json")["Devices"][0]
    assert_same_shape(three_g, excerpt)
    parent_bus = {s.id: p for p in fleet_node.gpus for s in p.mig or []}
    buses = {i["ID"]: i["Locality"]["PciBusID"] for i in three_g["Instances"]}
    first_parent = fleet_node.gpus[0]
    same_parent = [sid for sid, parent in parent_bus.items() if parent is first_parent]
    assert len({buses[s] for s in same_parent if s in buses}) == 1


def test_health_and_eligibility_show_on_the_node(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-2")
    gpu = node.gpus[3].id
    standin.set_gpu_health(node.id, gpu, False)
    standin.set_node_eligibility(node.id, False)
    read = client.node.get_node(node.id)
    instance = next(i for i in read["NodeResources"]["Devices"][0]["Instances"] if i["ID"] == gpu)
    assert instance["Healthy"] is False
    assert read["SchedulingEligibility"] == "ineligible"


def test_unknown_node_is_404(client: nomad.Nomad) -> None:
    try:
        client.node.get_node("00000000-0000-0000-0000-000000000000")
    except nomad.api.exceptions.URLNotFoundNomadException as exc:
        assert exc.nomad_resp.text == "node not found"
    else:
        raise AssertionError("expected 404")
