"""One colour per model, the same in the terminal view and the web dashboard.

Colours come from a list of well-separated hues (Sasha Trubetskoy's "20 simple, distinct
colours", minus the ones that vanish against the dashboard's dark free cells), given out in
the order of the sorted model names, so no two models of a catalog of up to 15 share one.
Past that, hues step by the golden angle. Each colour comes with the label colour (near-black
or white) that reads best on it.
"""

from __future__ import annotations

import colorsys

DISTINCT = [
    "#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6",
    "#bfef45", "#fabed4", "#469990", "#dcbeff", "#9a6324", "#aaffc3", "#808000",
]  # fmt: skip
DARK_TEXT = "#111111"
LIGHT_TEXT = "#ffffff"


def _luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance of #rrggbb."""

    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours (1 to 21; 4.5 is enough for small text)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_on(background: str) -> str:
    """The label colour that reads best on `background`."""
    if contrast(background, DARK_TEXT) >= contrast(background, LIGHT_TEXT):
        return DARK_TEXT
    return LIGHT_TEXT


def _extra(i: int) -> str:
    r, g, b = colorsys.hls_to_rgb((i * 0.381966) % 1.0, 0.55, 0.65)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def model_colours(names: list[str]) -> dict[str, str]:
    """name -> #rrggbb, distinct for up to len(DISTINCT) names."""
    ordered = sorted(set(names))
    return {
        name: DISTINCT[i] if i < len(DISTINCT) else _extra(i - len(DISTINCT))
        for i, name in enumerate(ordered)
    }
