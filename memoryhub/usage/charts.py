"""Bar charts drawn on the server as inline SVG: no JavaScript, nothing loaded from elsewhere."""

from dataclasses import dataclass
from datetime import datetime

WIDTH = 560
HEIGHT = 120
TOP = 8  # room above the tallest bar


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass
class Chart:
    title: str
    total: str
    peak: str
    bars: list[Bar]
    first: str
    last: str
    width: int = WIDTH
    height: int = HEIGHT


def human(value: float, unit: str = "") -> str:
    if unit == "bytes":
        for suffix in ("B", "KB", "MB", "GB", "TB"):
            if value < 1024 or suffix == "TB":
                return f"{value:,.0f} {suffix}" if suffix == "B" else f"{value:,.1f} {suffix}"
            value /= 1024
    return f"{value:,.0f}"


def bar_chart(*, title: str, labels: list[datetime], values: list[int], label_format: str, unit: str = "",
              level: bool = False) -> Chart:
    """One bar per value, scaled to the largest; each bar's tooltip gives its time and value."""
    peak = max(values, default=0)
    slot = WIDTH / max(len(values), 1)
    bars = []
    for index, (label, value) in enumerate(zip(labels, values)):
        height = (HEIGHT - TOP) * value / peak if peak else 0
        bars.append(Bar(
            x=round(index * slot + slot * 0.1, 1), y=round(HEIGHT - height, 1), width=round(slot * 0.8, 1),
            height=round(height, 1), title=f"{label.strftime(label_format)}: {human(value, unit)}",
        ))
    total = human(values[-1] if level and values else sum(values), unit)
    return Chart(
        title=title, total=("now " if level else "total ") + total, peak=human(peak, unit), bars=bars,
        first=labels[0].strftime(label_format) if labels else "", last=labels[-1].strftime(label_format) if labels else "",
    )
