"""HCL2 values for the jobspec parser: literals, templates, variables and block bodies.

python-hcl2 gives a tree where quoted strings keep their quotes (`'"x"'`) and bare
expressions come back as `${expr}`; that is what lets us tell a literal from a reference.
Input variables and `locals` are substituted in strings (`"${var.x}"`) and as bare
references (`var.x`); runtime variables such as `${node.unique.id}` stay for Nomad.
"""

from __future__ import annotations

import re
from typing import Any

import hcl2

OPTIONS = hcl2.SerializationOptions(with_comments=False, preserve_heredocs=False)
_BLOCK = "__is_block__"
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_NS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_REFERENCE = re.compile(r"^(var|local)\.([A-Za-z_][\w-]*)$")


class HclError(ValueError):
    """A jobspec that cannot be parsed; the message follows `Failed to parse job: `."""


# ---------------------------------------------------------------- values


class Scope:
    def __init__(self, variables: dict[str, Any], locals_: dict[str, Any]) -> None:
        self.variables = variables
        self.locals = locals_

    def lookup(self, expr: str) -> tuple[bool, Any]:
        match = _REFERENCE.match(expr.strip())
        if not match:
            return False, None
        kind, name = match.groups()
        table = self.variables if kind == "var" else self.locals
        if name not in table:
            label = "variable" if kind == "var" else "local value"
            raise HclError(f'Reference to undeclared {label}: "{kind}.{name}" is not declared')
        return True, table[name]


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt == "u" and i + 6 <= len(body):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _interpolations(text: str) -> list[tuple[int, int, str]]:
    """(start, end, expr) of each `${...}`, matching braces and skipping quoted strings."""
    found: list[tuple[int, int, str]] = []
    i = 0
    while True:
        start = text.find("${", i)
        if start < 0:
            return found
        if start > 0 and text[start - 1] == "$":  # `$${` is a literal `${`
            i = start + 2
            continue
        depth, j, quoted = 1, start + 2, False
        while j < len(text) and depth:
            ch = text[j]
            if quoted:
                if ch == "\\":
                    j += 1
                elif ch == '"':
                    quoted = False
            elif ch == '"':
                quoted = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            j += 1
        if depth:
            raise HclError(f"unterminated template interpolation in {text!r}")
        found.append((start, j, text[start + 2 : j - 1]))
        i = j


def _template(text: str, scope: Scope) -> str:
    parts, last = [], 0
    for start, end, expr in _interpolations(text):
        parts.append(text[last:start])
        known, value = scope.lookup(expr)
        parts.append(as_text(value) if known else text[start:end])
        last = end
    parts.append(text[last:])
    return "".join(parts).replace("$${", "${").replace("%%{", "%{")


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def evaluate(value: Any, scope: Scope) -> Any:
    """Turn python-hcl2's serialised value into plain JSON, substituting variables."""
    if isinstance(value, str):
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            return _template(_unescape(value[1:-1]), scope)
        if value.startswith("${") and value.endswith("}"):
            expr = value[2:-1]
            known, resolved = scope.lookup(expr)
            if known:
                return resolved
            # A runtime variable written without quotes, or an expression we do not evaluate.
            raise HclError(
                f"unsupported expression {expr!r}: quote runtime variables"
                ' ("${node.unique.id}") and use only var.* and local.* references'
            )
        return value
    if isinstance(value, list):
        return [evaluate(v, scope) for v in value]
    if isinstance(value, dict):
        return {_key(k): evaluate(v, scope) for k, v in value.items() if k != _BLOCK}
    return value


def _key(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key.startswith('"') and key.endswith('"') else key


# ---------------------------------------------------------------- tree helpers


def blocks_of(body: dict[str, Any], name: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(label, body) of each `name` block; label None for unlabelled blocks."""
    found: list[tuple[str | None, dict[str, Any]]] = []
    for item in body.get(name) or []:
        if not isinstance(item, dict):
            continue
        if item.get(_BLOCK):
            found.append((None, item))
            continue
        for label, inner in item.items():
            if isinstance(inner, dict):
                found.append((_key(label), inner))
    return found


def _is_block_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(v, dict) and (v.get(_BLOCK) or all(isinstance(x, dict) for x in v.values()))
            for v in value
        )
    )


class Body:
    """One block's body, with the keys it may hold; a stray key is a parse error like Nomad's."""

    def __init__(
        self, raw: dict[str, Any], where: str, scope: Scope, attrs: set[str], blocks: set[str]
    ) -> None:
        self.raw, self.where, self.scope = raw, where, scope
        for key, value in raw.items():
            if key == _BLOCK:
                continue
            if key in blocks and (_is_block_list(value) or key in attrs):
                continue
            if key in attrs:
                continue
            kind = "block type" if _is_block_list(value) else "argument"
            raise HclError(
                f'{where}: Unsupported {kind}; An {kind} named "{key}" is not expected here.'
            )

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.raw or _is_block_list(self.raw[key]):
            return default
        return evaluate(self.raw[key], self.scope)

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.get(key, default)
        if value is None or isinstance(value, str):
            return value
        return as_text(value)

    def integer(self, key: str, default: int | None = None) -> int | None:
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise HclError(f"{self.where}: {key}: a number is required")
        try:
            number = float(value)
        except ValueError as exc:
            raise HclError(f"{self.where}: {key}: a number is required, got {value!r}") from exc
        if number != int(number):
            raise HclError(f"{self.where}: {key}: a whole number is required, got {value!r}")
        return int(number)

    def flag(self, key: str, default: bool | None = None) -> bool | None:
        value = self.get(key, default)
        if value is None or isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise HclError(f"{self.where}: {key}: a bool is required, got {value!r}")

    def duration(self, key: str, default: int | None = None) -> int | None:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
        return parse_duration(str(value), f"{self.where}: {key}")

    def strings(self, key: str) -> list[str] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise HclError(f"{self.where}: {key}: a list of strings is required")
        return [as_text(v) for v in value]

    def map(self, key: str) -> dict[str, Any] | None:
        """`key = {..}` or `key { .. }`."""
        if key not in self.raw:
            return None
        value = self.raw[key]
        if _is_block_list(value):
            merged: dict[str, Any] = {}
            for item in value:
                merged.update(evaluate(item, self.scope))
            return merged
        result = evaluate(value, self.scope)
        if not isinstance(result, dict):
            raise HclError(f"{self.where}: {key}: a map is required")
        return result

    def blocks(self, name: str) -> list[tuple[str | None, dict[str, Any]]]:
        return blocks_of(self.raw, name)


def parse_duration(text: str, where: str) -> int:
    if text == "0":
        return 0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _NS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise HclError(f'{where}: time: invalid duration "{text}"')
    return int(total)


# ---------------------------------------------------------------- variables


def _literal(value: Any) -> Any:
    return evaluate(value, Scope({}, {}))


def variables_from(tree: dict[str, Any], overrides: str) -> dict[str, Any]:
    declared: dict[str, Any] = {}
    required: set[str] = set()
    for label, body in blocks_of(tree, "variable"):
        if label is None:
            raise HclError("variable block needs a name label")
        if "default" in body:
            declared[label] = _literal(body["default"])
        else:
            required.add(label)
    if overrides.strip():
        try:
            given = hcl2.loads(overrides, serialization_options=OPTIONS)
        except Exception as exc:
            raise HclError(f"Variables: {first_line(exc)}") from exc
        for name, value in given.items():
            if name not in declared and name not in required:
                raise HclError(
                    f'Undefined variable: A "{name}" variable was assigned a value,'
                    " but not declared"
                )
            declared[name] = _literal(value)
            required.discard(name)
    for name in sorted(required):
        raise HclError(
            f'Unset variable "{name}": A used variable must be set or have a default value'
        )
    return declared


def locals_from(tree: dict[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for _, body in blocks_of(tree, "locals"):
        for key, raw in body.items():
            if key != _BLOCK:
                values[key] = evaluate(raw, Scope(variables, values))
    return values


def first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
