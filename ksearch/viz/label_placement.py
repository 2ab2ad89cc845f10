"""Point labels that never overlap: each label tries a few spots around its point and takes the first free one.

With a dozen points near one another, labels drawn at a fixed offset pile into an unreadable blob. Here
every label is measured on the figure's renderer and kept only where it overlaps no other label, no
point and stays inside the axes; a label with no free spot is left out (the caller says how many).
The figure's layout must be final before this runs (positions are in display coordinates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Offsets (points) to try, nearest first: right-above, right-below, left-above, left-below, above, below.
_DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (0, 1), (0, -1), (1, 0), (-1, 0))
_RADII = (3, 9, 16)
#: Half the side of the box kept free around each point's marker, in pixels.
_MARKER_PX = 4.0


def _align(dx: int, dy: int) -> tuple[str, str]:
    ha = "left" if dx > 0 else "right" if dx < 0 else "center"
    va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
    return ha, va


def place_labels(ax: Any, xy: Sequence[tuple[float, float]], labels: Sequence[str], *, fontsize: float = 6,
                 color: str = "0.35") -> int:
    """Annotate each point (data coordinates) with its label where it overlaps nothing; returns how many
    labels had no free spot and were left out."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    taken: list[Any] = []
    for x, y in xy:
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - _MARKER_PX, py - _MARKER_PX, px + _MARKER_PX, py + _MARKER_PX))
    left_out = 0
    for (x, y), label in zip(xy, labels):
        placed = False
        for radius in _RADII:
            for dx, dy in _DIRECTIONS:
                ha, va = _align(dx, dy)
                note = ax.annotate(label, (x, y), xytext=(dx * radius, dy * radius), textcoords="offset points",
                                   ha=ha, va=va, fontsize=fontsize, color=color, annotation_clip=False)
                note.set_in_layout(False)
                box = note.get_window_extent(renderer)
                fits = (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0
                        and box.y1 <= inside.y1 and not any(box.overlaps(t) for t in taken))
                if fits:
                    taken.append(box)
                    placed = True
                    break
                note.remove()
            if placed:
                break
        left_out += not placed
    return left_out
