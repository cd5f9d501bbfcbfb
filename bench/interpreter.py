"""Which CPython build runs a benchmark: the same pass differs by a fifth between builds.

A pass spends most of its time in CPython itself (dict lookups, allocation, reference counts),
so how libpython was built shows in every figure: a libpython linked into the executable and
built with profile-guided optimization (Debian's) against a shared one built without
`--enable-optimizations` (pyenv's default), and 3.11 against 3.12 and 3.13, whose shared
libpython keeps the thread state in a thread-local variable (read through __tls_get_addr; the
Dockerfile ships 3.11 for this). The measured differences are in bench/README.md. Figures
taken on different builds are not comparable; ratios measured side by side on one build are.
"""

from __future__ import annotations

import platform
import sys
import sysconfig
from pathlib import Path
from typing import Any

_FLAGS = ("--enable-optimizations", "--with-lto")


def describe() -> dict[str, Any]:
    """Version, executable, where libpython lives, and the optimization flags its configure
    line shows (a distribution may build its static interpreter with flags not shown there)."""
    config = sysconfig.get_config_var("CONFIG_ARGS") or ""
    return {
        "version": platform.python_version(),
        "executable": sys.executable,
        "libpython": _libpython() or "linked into the executable",
        "configure_optimization_flags": [f for f in _FLAGS if f in config],
    }


def _libpython() -> str | None:
    """The shared libpython this process mapped, if any (Linux: /proc/self/maps)."""
    maps = Path("/proc/self/maps")
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields and "/libpython" in fields[-1]:
            return fields[-1]
    return None
