"""A self-contained SVG picture of a run: bus bandwidth per message size, and each node's link.

No plotting library: plain SVG text with inline styles and no external references, readable in
any browser. The top panel plots all-reduce bus bandwidth (Gb/s) against message size (log
scale) with the cluster's line rate as a dashed line; the bottom panel has one bar per node
(its link bandwidth) with the node's line rate as a tick, slow nodes in red and labelled. Every
value is written beside its point or on its bar, and each bar is labelled with the node's host
name and address: a picture pasted into an issue or turned into a PNG keeps no tooltips.
Elements carry ``class`` and ``data-*`` attributes (``point``/``data-size``, ``bar``/
``data-node``/``data-slow``, ``value``, ``node-label``) so the picture can be checked by a
program too.

A panel with nothing to show is left out, never drawn as empty axes: one node has no link
between nodes, and one rank times no all-reduce. :func:`nothing_to_draw` says when no panel
is left.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from xml.sax.saxutils import escape

from clusterenv._text import count
from clusterenv.bench.model import BenchResult, LinkResult
from clusterenv.bench.units import format_size

__all__ = ["nothing_to_draw", "render_svg", "write_svg"]

_W = 760
_LEFT, _RIGHT = 70, 20
_PLOT_W = _W - _LEFT - _RIGHT
_H1 = 220                  # bus bandwidth panel
_H2 = 200                  # link panel
_OK, _SLOW, _RATE = "#3465a4", "#cc0000", "#888888"
# A bar this wide (pixels) has room for its labels written across; narrower ones are turned.
_WIDE_SLOT = 90

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

def _size_panel(result: BenchResult, top: int) -> list[str]:
    out = [_text(_W / 2, top - 12, f"all-reduce bus bandwidth, "
                 f"{count(result.world_size, 'rank')} ({result.backend})", size=13)]
    sizes = result.sizes
    # The line rate only judges an all-reduce that crossed nodes (see bench.conclude).
    rate = result.line_rate_gbps if result.num_nodes > 1 else None
    values = [s.busbw_gbs * 8 for s in sizes]
    y_max = max([*values, rate or 0.0, 1e-9]) * 1.15
    out += _axes(top, _H1, y_max, "bus bandwidth (Gb/s)")
    if rate is not None:
        y = top + _H1 - rate / y_max * _H1
        out.append(f'<line class="line-rate" x1="{_LEFT}" y1="{_num(y)}" '
                   f'x2="{_LEFT + _PLOT_W}" y2="{_num(y)}" stroke="{_RATE}" '
                   'stroke-dasharray="6 4"/>')
        out.append(_text(_LEFT + _PLOT_W - 4, y - 4, f"line rate {rate:g} Gb/s", anchor="end",
                         size=10))
    logs = [math.log2(s.size) for s in sizes]
    lo, hi = min(logs), max(logs)

    def x_of(log: float) -> float:
        if hi == lo:
            return _LEFT + _PLOT_W / 2
        return _LEFT + 20 + (log - lo) / (hi - lo) * (_PLOT_W - 40)

    points = [(x_of(lg), top + _H1 - v / y_max * _H1) for lg, v in zip(logs, values,
                                                                        strict=True)]
    out.append('<polyline class="curve" fill="none" stroke="' + _OK + '" stroke-width="2" '
               'points="' + " ".join(f"{_num(x)},{_num(y)}" for x, y in points) + '"/>')
    for (x, y), s, v in zip(points, sizes, values, strict=True):
        out.append(f'<circle class="point" data-size="{s.size}" data-busbw-gbps="{v:.6g}" '
                   f'cx="{_num(x)}" cy="{_num(y)}" r="4" fill="{_OK}">'
                   f"<title>{escape(format_size(s.size))}: {v:.3g} Gb/s</title></circle>")
        out.append(_text(x, y - 8, f"{v:.3g}", size=10,
                         extra=f' class="value" data-size="{s.size}"'))
        out.append(_text(x, top + _H1 + 16, format_size(s.size), size=10))
    out.append(_text(_LEFT + _PLOT_W / 2, top + _H1 + 34, "message size (bytes per rank)"))
    return out


def _node_lines(link: LinkResult) -> list[str]:
    """``["node 2", "node-2", "10.65.0.4"]``: who the bar is, as people name nodes."""
    return [f"node {link.node}", *(v for v in (link.hostname, link.address) if v)]


def _link_labels_height(result: BenchResult) -> int:
    """Room under the link panel for the node labels: three lines across a wide bar, one
    turned line under a narrow one."""
    slot = _PLOT_W / max(len(result.links), 1)
    if slot >= _WIDE_SLOT:
        return 3 * 13 + 30
    longest = max((len(" · ".join(_node_lines(link))) for link in result.links), default=10)
    return min(6 * longest + 30, 260)


def _link_panel(result: BenchResult, top: int) -> list[str]:
    out = [_text(_W / 2, top - 12, "each node's link (point-to-point, slower direction)",
                 size=13)]
    links = result.links
    values = [(link.gbs or 0.0) * 8 for link in links]
    rates = [link.line_rate_gbps or 0.0 for link in links]
    slot = _PLOT_W / len(links)
    # Headroom above the tallest bar for its value (and SLOW), turned or not.
    y_max = max([*values, *rates, 1e-9]) * (1.15 if slot >= _WIDE_SLOT else 1.4)
    out += _axes(top, _H2, y_max, "link bandwidth (Gb/s)")
    width = max(4.0, min(60.0, slot * 0.6))
    base = top + _H2
    for i, (link, value) in enumerate(zip(links, values, strict=True)):
        x = _LEFT + slot * i + (slot - width) / 2
        middle = x + width / 2
        height = value / y_max * _H2
        colour = _SLOW if link.slow else _OK
        lines = _node_lines(link)
        out.append(
            f'<rect class="bar" data-node="{link.node}" data-slow="{str(link.slow).lower()}" '
            f'data-gbps="{value:.6g}" x="{_num(x)}" y="{_num(base - height)}" '
            f'width="{_num(width)}" height="{_num(height)}" fill="{colour}">'
            f"<title>{escape(', '.join(lines))}: {value:.3g} Gb/s</title></rect>")
        if link.line_rate_gbps:
            y = base - link.line_rate_gbps / y_max * _H2
            out.append(f'<line class="bar-line-rate" data-node="{link.node}" '
                       f'x1="{_num(x - 4)}" y1="{_num(y)}" x2="{_num(x + width + 4)}" '
                       f'y2="{_num(y)}" stroke="{_RATE}" stroke-width="2"/>')
        value_text = f"{value:.3g}"
        slow_marks = (f' class="slow-label" data-node="{link.node}" fill="{_SLOW}" '
                      'font-weight="bold"')
        if slot >= _WIDE_SLOT:
            out.append(_text(middle, base - height - 6, value_text, size=11,
                             extra=f' class="value" data-node="{link.node}"'))
            if link.slow:
                out.append(_text(middle, base - height - 20, "SLOW", size=11,
                                 extra=slow_marks))
            for row, line in enumerate(lines):
                out.append(_text(middle, base + 16 + 13 * row, line, size=10,
                                 extra=f' class="node-label" data-node="{link.node}"'))
        else:  # turned, reading upwards, so that dozens of nodes still fit
            y = base - height - 4
            out.append(_text(middle + 4, y, value_text, anchor="start", size=10,
                             extra=f' class="value" data-node="{link.node}" '
                                   f'transform="rotate(-90 {_num(middle + 4)} {_num(y)})"'))
            if link.slow:
                y_slow = y - 6 * len(value_text) - 6
                out.append(_text(middle + 4, y_slow, "SLOW", anchor="start", size=10,
                                 extra=f'{slow_marks} transform="rotate(-90 '
                                       f'{_num(middle + 4)} {_num(y_slow)})"'))
            out.append(_text(middle + 3, base + 8, " · ".join(lines), anchor="end", size=10,
                             extra=f' class="node-label" data-node="{link.node}" '
                                   f'transform="rotate(-90 {_num(middle + 3)} '
                                   f'{_num(base + 8)})"'))
    out.append(_text(_LEFT + _PLOT_W / 2, base + _link_labels_height(result),
                     "Gb/s on each bar; grey tick: the node's line rate; red: slow node"))
    return out


def nothing_to_draw(result: BenchResult) -> str | None:
    """Why a run has no picture, e.g. ``"one rank on one node measured nothing"``; None when
    it has one (an all-reduce curve, or links between nodes)."""
    if result.sizes or _has_links(result):
        return None
    if result.world_size <= 1:
        return "one rank on one node measured nothing"
    return "nothing was measured (the time limit came first)"


def _has_links(result: BenchResult) -> bool:
    return result.num_nodes > 1 and bool(result.links)


def render_svg(result: BenchResult) -> str:
    """The picture as SVG text (UTF-8, self-contained), e.g. ``'<svg xmlns=...>…</svg>'``:
    the panels that have something to show (:func:`nothing_to_draw` says when none has)."""
    verdict = ("slow: " + ", ".join(f"node {n}" for n in result.slow_nodes)
               if result.slow_nodes else "no slow node" if result.num_nodes > 1 else
               "within one node")
    title = (f"clusterenv bench: {count(result.num_nodes, 'node')}, "
             f"{count(result.world_size, 'rank')}, {result.backend}; {verdict}")
    top = 50
    panels: list[str] = []
    if result.sizes:
        panels += _size_panel(result, top)
        top += _H1 + 70
    if _has_links(result):
        panels += _link_panel(result, top)
        top += _H2 + _link_labels_height(result) + 20
    if not panels:
        panels.append(_text(_W / 2, top + 20, nothing_to_draw(result) or "", size=13))
        top += 40
    height = top
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
        f'viewBox="0 0 {_W} {height}" font-family="sans-serif">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{_W}" height="{height}" fill="white"/>',
        _text(_W / 2, 20, title, size=14, extra=' font-weight="bold"'),
        *panels,
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
