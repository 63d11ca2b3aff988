"""Assertions shared by the figure tests: a figure renders to PNG, an axis is labelled."""
from __future__ import annotations

import io

from matplotlib.axes import Axes
from matplotlib.figure import Figure


def renders(fig: Figure) -> bytes:
    """The figure saved as a small PNG (asserts that it is one)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    data = buf.getvalue()
    assert data.startswith(b"\x89PNG")
    return data


def labelled(ax: Axes, *, left_title: bool = False) -> None:
    """Both axis labels and a title (with ``left_title``, a left-aligned title counts too)."""
    title = ax.get_title() or (left_title and ax.get_title(loc="left"))
    assert ax.get_xlabel() and ax.get_ylabel() and title
