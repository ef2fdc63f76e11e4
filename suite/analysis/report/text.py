"""Numbers, sizes and lists as a report's sentences, tables and axes write them: the one place
for that text, shared by every section (and by no matplotlib code of its own)."""

from __future__ import annotations

import math
import re


def pct(fraction: float, digits: int = 1) -> str:
    """A fraction as percent: 0.8123 -> 81.2 %."""
    return f"{100 * fraction:.{digits}f} %"


def human_bytes(n: float) -> str:
    """Binary units, three significant digits: 315,432 -> 308 KiB, 12.5 KiB, 616 B, 0 B."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def approx(value: float) -> str:
    """Two significant digits with thousands separators: 188.4 -> 190, 1,312 -> 1,300."""
    rounded = float(f"{value:.2g}")
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def plain_number(v: float, _pos=None) -> str:
    """1,000,000 rather than 1e+06; small values keep three significant digits."""
    return f"{v:,.0f}" if v >= 1 else f"{v:.3g}"


def steps_text(steps: float) -> str:
    """Optimizer steps, or "never" for a run that did not reach its target."""
    return f"{steps:,.0f}" if math.isfinite(steps) else "never"


def ms(seconds: float) -> str:
    """Seconds as milliseconds: 0.0812 -> 81 ms, 0.0042 -> 4.2 ms."""
    value = 1e3 * seconds
    return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"


def plural(n: int, word: str) -> str:
    """3 runs, 1 run."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def slug(text: str) -> str:
    """A label as a file-name part: "mnist1d_mlp, b=32" -> "mnist1d-mlp-b-32"."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def rules_text(rules: list[str]) -> str:
    """`a`, `b` and `c`."""
    named = [f"`{r}`" for r in rules]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
