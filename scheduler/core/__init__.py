"""The pure decision core: snapshot in, plan out. No I/O, no clock, no adapters.

tests/test_architecture.py keeps it so: nothing under scheduler.core may import an
adapter, a client library, NVML, or anything that does I/O.
"""
