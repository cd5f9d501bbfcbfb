"""Embedded stand-ins for Consul and Nomad that speak their HTTP APIs.

They exist because no real server can be installed where this project is built and tested;
the scheduler reaches them through the same client libraries as real servers.
"""
