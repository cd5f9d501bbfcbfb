"""Adapters at the edge: Consul, Nomad, NVML, clocks and threads live here, never in the core."""
