"""A self-contained SVG picture of a run: bus bandwidth per message size, and each node's link.

No plotting library: plain SVG text with inline styles and no external references, readable in
any browser. The top panel plots all-reduce bus bandwidth (Gb/s) against message size (log
scale) with the cluster's line rate as a dashed line; the bottom panel has one bar per node
(its link bandwidth) with the node's line rate as a tick, slow nodes in red and labelled.
Elements carry ``class`` and ``data-*`` attributes (``point``/``data-size``, ``bar``/
``data-node``/``data-slow``) so the picture can be checked by a program too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from xml.sax.saxutils import escape

from clusterenv.bench.model import BenchResult
from clusterenv.bench.units import format_size

__all__ = ["render_svg", "write_svg"]

_W = 760
_LEFT, _RIGHT = 70, 20
_PLOT_W = _W - _LEFT - _RIGHT
_TOP1, _H1 = 50, 220       # bus bandwidth panel
_TOP2, _H2 = 340, 200      # link panel
_H = _TOP2 + _H2 + 60
_OK, _SLOW, _RATE = "#3465a4", "#cc0000", "#888888"

def _num(value: float) -> str:
    return f"{value:.1f}"

def _ticks(top: float) -> list[float]:
    """About five round tick values from 0 to ``top``."""
    if top <= 0:
        return [0.0]
    raw = top / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top / step) + 1)]

def _text(x: float, y: float, text: str, *, anchor: str = "middle", size: int = 11,
          extra: str = "") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" font-size="{size}"'
            f"{extra}>{escape(text)}</text>")

def _axes(top: int, height: int, y_max: float, unit: str) -> list[str]:
    out = [f'<line x1="{_LEFT}" y1="{top + height}" x2="{_LEFT + _PLOT_W}" '
           f'y2="{top + height}" stroke="black"/>',
           f'<line x1="{_LEFT}" y1="{top}" x2="{_LEFT}" y2="{top + height}" stroke="black"/>']
    for tick in _ticks(y_max):
        y = top + height - tick / y_max * height if y_max > 0 else top + height
        out.append(f'<line x1="{_LEFT - 4}" y1="{_num(y)}" x2="{_LEFT + _PLOT_W}" '
                   f'y2="{_num(y)}" stroke="#e0e0e0"/>')
        out.append(_text(_LEFT - 6, y + 4, f"{tick:g}", anchor="end", size=10))
    out.append(_text(16, top + height / 2, unit, extra=f' transform="rotate(-90 16 '
                                                         f'{_num(top + height / 2)})"'))
    return out

def _size_panel(result: BenchResult) -> list[str]:
    out = [_text(_W / 2, _TOP1 - 12, f"all-reduce bus bandwidth, {result.world_size} ranks "
                 f"({result.backend})", size=13)]
    sizes = result.sizes
    rate = result.line_rate_gbps
    values = [s.busbw_gbs * 8 for s in sizes]
    y_max = max([*values, rate or 0.0, 1e-9]) * 1.1
    out += _axes(_TOP1, _H1, y_max, "bus bandwidth (Gb/s)")
    if rate is not None:
        y = _TOP1 + _H1 - rate / y_max * _H1
        out.append(f'<line class="line-rate" x1="{_LEFT}" y1="{_num(y)}" '
                   f'x2="{_LEFT + _PLOT_W}" y2="{_num(y)}" stroke="{_RATE}" '
                   'stroke-dasharray="6 4"/>')
        out.append(_text(_LEFT + _PLOT_W - 4, y - 4, f"line rate {rate:g} Gb/s", anchor="end",
                         size=10))
    if not sizes:
        return out
    logs = [math.log2(s.size) for s in sizes]
    lo, hi = min(logs), max(logs)

    def x_of(log: float) -> float:
        if hi == lo:
            return _LEFT + _PLOT_W / 2
        return _LEFT + 20 + (log - lo) / (hi - lo) * (_PLOT_W - 40)

    points = [(x_of(lg), _TOP1 + _H1 - v / y_max * _H1) for lg, v in zip(logs, values,
                                                                          strict=True)]
    out.append('<polyline class="curve" fill="none" stroke="' + _OK + '" stroke-width="2" '
               'points="' + " ".join(f"{_num(x)},{_num(y)}" for x, y in points) + '"/>')
    for (x, y), s, v in zip(points, sizes, values, strict=True):
        out.append(f'<circle class="point" data-size="{s.size}" data-busbw-gbps="{v:.6g}" '
                   f'cx="{_num(x)}" cy="{_num(y)}" r="4" fill="{_OK}">'
                   f"<title>{escape(format_size(s.size))}: {v:.3g} Gb/s</title></circle>")
        out.append(_text(x, _TOP1 + _H1 + 16, format_size(s.size), size=10))
    out.append(_text(_LEFT + _PLOT_W / 2, _TOP1 + _H1 + 34, "message size (bytes per rank)"))
    return out

def _link_panel(result: BenchResult) -> list[str]:
    out = [_text(_W / 2, _TOP2 - 12, "each node's link (point-to-point, slower direction)",
                 size=13)]
    links = result.links
    values = [(link.gbs or 0.0) * 8 for link in links]
    rates = [link.line_rate_gbps or 0.0 for link in links]
    y_max = max([*values, *rates, 1e-9]) * 1.1
    out += _axes(_TOP2, _H2, y_max, "link bandwidth (Gb/s)")
    if not links:
        return out
    slot = _PLOT_W / len(links)
    width = max(4.0, min(60.0, slot * 0.6))
    for i, (link, value) in enumerate(zip(links, values, strict=True)):
        x = _LEFT + slot * i + (slot - width) / 2
        height = value / y_max * _H2
        colour = _SLOW if link.slow else _OK
        label = f"node {link.node}" + (f" {link.address}" if link.address else "")
        out.append(
            f'<rect class="bar" data-node="{link.node}" data-slow="{str(link.slow).lower()}" '
            f'data-gbps="{value:.6g}" x="{_num(x)}" y="{_num(_TOP2 + _H2 - height)}" '
            f'width="{_num(width)}" height="{_num(height)}" fill="{colour}">'
            f"<title>{escape(label)}: {value:.3g} Gb/s</title></rect>")
        if link.line_rate_gbps:
            y = _TOP2 + _H2 - link.line_rate_gbps / y_max * _H2
            out.append(f'<line class="bar-line-rate" data-node="{link.node}" '
                       f'x1="{_num(x - 4)}" y1="{_num(y)}" x2="{_num(x + width + 4)}" '
                       f'y2="{_num(y)}" stroke="{_RATE}" stroke-width="2"/>')
        out.append(_text(x + width / 2, _TOP2 + _H2 + 16, f"node {link.node}", size=10))
        if link.slow:
            out.append(_text(x + width / 2, _TOP2 + _H2 - height - 6, "SLOW", size=11,
                             extra=f' class="slow-label" data-node="{link.node}" '
                                   f'fill="{_SLOW}" font-weight="bold"'))
    out.append(_text(_LEFT + _PLOT_W / 2, _TOP2 + _H2 + 34,
                     "grey tick: the node's line rate; red: slow node"))
    return out

def render_svg(result: BenchResult) -> str:
    """The picture as SVG text (UTF-8, self-contained), e.g. ``'<svg xmlns=...>…</svg>'``."""
    verdict = ("slow: " + ", ".join(f"node {n}" for n in result.slow_nodes)
               if result.slow_nodes else "no slow node")
    title = (f"clusterenv bench: {result.num_nodes} nodes, {result.world_size} ranks, "
             f"{result.backend}; {verdict}")
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        _text(_W / 2, 20, title, size=14, extra=' font-weight="bold"'),
        *_size_panel(result),
        *_link_panel(result),
        "</svg>",
    ]
    return "\n".join(body) + "\n"

def write_svg(result: BenchResult, path: str | os.PathLike[str]) -> Path:
    """Write :func:`render_svg` to ``path`` and return it.

    Raises:
        OSError: When the file cannot be written.
    """
    target = Path(path)
    target.write_text(render_svg(result), encoding="utf-8")
    return target

