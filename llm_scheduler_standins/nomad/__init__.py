"""An embedded stand-in for a Nomad server with NVIDIA GPUs fingerprinted by the device plugin."""

from llm_scheduler_standins.nomad.acl import READ, WRITE, NomadACL, NomadToken
from llm_scheduler_standins.nomad.server import NomadStandin

__all__ = ["READ", "WRITE", "NomadACL", "NomadStandin", "NomadToken"]
