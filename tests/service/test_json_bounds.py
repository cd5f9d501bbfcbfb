"""KV values are decoded within bounds: no RecursionError, no infinity, no huge integers."""

from __future__ import annotations

import pytest

from scheduler.adapters.json_bounds import MAX_DEPTH, BoundsError, bounded_loads, nesting_depth


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than"),
        (b'{"a": NaN}', "a: NaN is not valid JSON"),
        (b'{"a": [1, -Infinity]}', "a[1]: -Infinity is not valid JSON"),
        (b'{"a": {"b": 1e999}}', "a.b: number 1e999 is out of range"),
        (b'{"n": ' + b"9" * 400 + b"}", "n: integer 99999999999999999999... is out of range"),
        (b'{"s": "a\\u0000b"}', "s: string contains a control character"),
        (b'{"s": "' + b"x" * 5000 + b'"}', "s: string of 5000 characters is too long"),
        (b"x" * 70, "over the limit of 64"),
        (b"", "value is empty"),
        (b"\xff", "not valid JSON"),
    ],
)
def test_out_of_bounds_values_are_one_sentence_naming_the_field(raw: bytes, message: str) -> None:
    with pytest.raises(BoundsError) as err:
        bounded_loads(raw, 64 if raw.startswith(b"x") else 1 << 20)
    assert message in str(err.value)


def test_values_within_bounds_decode_as_json_does() -> None:
    raw = b'{"a": [1, 2.5, "x\\ny", {"b": null}], "brackets": "[[[[[[[[[[[[[[[[[[[[[["}'
    assert bounded_loads(raw, 1024) == {
        "a": [1, 2.5, "x\ny", {"b": None}],
        "brackets": "[" * 22,
    }
    assert nesting_depth(b'"[[[[[[[[[[[[[[[[[[[[[[[[[[[["') == 0  # brackets in strings do not nest
    nested = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert bounded_loads(nested, 1024) is not None
