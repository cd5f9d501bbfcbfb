"""Go `time.ParseDuration` and `Duration.String`, as Consul parses `wait`, `TTL` and `LockDelay`."""

from __future__ import annotations

import re

_UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

SECOND_NS = 1_000_000_000


def parse_go_duration(text: str) -> int:
    """Nanoseconds for a Go duration string ("15s", "1m30s", "100ms"); ValueError names the text."""
    original = text
    sign = 1
    if text[:1] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    total = 0.0
    position = 0
    while position < len(text):
        match = _PART.match(text, position)
        if match is None:
            if re.fullmatch(r"[\d.]+", text[position:]):
                raise ValueError(f'time: missing unit in duration "{original}"')
            raise ValueError(f'time: invalid duration "{original}"')
        total += float(match.group(1)) * _UNIT_NS[match.group(2)]
        position = match.end()
    return sign * int(total)


def format_go_duration(ns: int) -> str:
    """Go's Duration.String for whole-second-or-larger values ("10s", "24h0m0s")."""
    if ns == 0:
        return "0s"
    seconds, rest_ns = divmod(ns, SECOND_NS)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    fraction = f"{rest_ns / SECOND_NS:.9f}".rstrip("0").rstrip(".")[1:] if rest_ns else ""
    text = f"{seconds}{fraction}s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text
