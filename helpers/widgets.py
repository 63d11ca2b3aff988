"""Interactive explorers for the chapters (ipywidgets).

Each explorer is a function returning an :class:`ipywidgets.VBox` that also
carries an ``update()`` method. ``update()`` recomputes the numbers and redraws
the figure from the current slider values and returns the numbers as a dict,
so the explorer can be driven headless (the book build, tests) exactly as a reader's
slider drag would drive it. The explorer draws once when it is built. Its numbers come
from the results stored with the course (:mod:`helpers.stored`), one per slider position.
"""
from __future__ import annotations

from typing import Any

import ipywidgets as W

from helpers.plots import alpha_beta_allreduce_time, format_bytes, format_count, plot_allreduce_time, show_figures
from helpers.stored import load

__all__ = ["allreduce_explorer"]

_DTYPES = {"float32 (4 B)": 4, "bfloat16 / float16 (2 B)": 2, "float64 (8 B)": 8, "fp8 (1 B)": 1}


def allreduce_explorer(
    world_size: int = 8,
    num_params: float = 1.3e9,
    bytes_per_element: int = 4,
    bandwidth_gb_s: float = 25.0,
    latency_us: float = 10.0,
) -> W.VBox:
    """Sliders for a ring all-reduce of the gradient under an alpha-beta model.

    Controls: world size N (powers of 2 up to 1024), parameter count (a 1-2-5 series),
    bytes per element, link bandwidth (GB/s, 1 GB = 1e9 B) and per-message latency alpha
    (µs). Shows the bytes each rank sends (stored result ``01_allreduce_explorer``), the
    predicted time split into its latency and bandwidth terms, and a plot of time against N.
    ``world_size``, ``num_params`` and ``bytes_per_element`` must be slider positions.
    """
    grid = load("01_allreduce_explorer")
    world_sizes, params = list(grid["world_sizes"]), list(grid["num_params"])
    dtypes = {label: b for label, b in _DTYPES.items() if b in grid["bytes_per_element"]}
    for name, value, options in (("world_size", world_size, world_sizes), ("num_params", num_params, params),
                                 ("bytes_per_element", bytes_per_element, list(dtypes.values()))):
        if value not in options:
            raise ValueError(f"{name} must be one of {options}, got {value!r}")
    style = {"description_width": "150px"}
    layout = W.Layout(width="520px")
    n_slider = W.SelectionSlider(options=world_sizes, value=int(world_size), description="world size N",
                                 style=style, layout=layout, continuous_update=False)
    p_slider = W.SelectionSlider(options=[(format_count(m), m) for m in params], value=int(num_params),
                                 description="parameters", style=style, layout=layout, continuous_update=False)
    dtype = W.Dropdown(options=list(dtypes.items()), value=bytes_per_element, description="gradient dtype",
                       style=style, layout=layout)
    bw_slider = W.FloatLogSlider(value=bandwidth_gb_s, base=10, min=-1, max=3, step=0.05,
                                 description="link bandwidth (GB/s)", style=style, layout=layout,
                                 continuous_update=False, readout_format=".3g")
    lat_slider = W.FloatLogSlider(value=latency_us, base=10, min=0, max=3, step=0.05,
                                  description="latency α (µs)", style=style, layout=layout,
                                  continuous_update=False, readout_format=".3g")
    summary = W.HTML()
    out = W.Output()

    def update(*_: Any) -> dict[str, float]:
        n, m, b = int(n_slider.value), int(p_slider.value), int(dtype.value)
        bw, lat = bw_slider.value * 1e9, lat_slider.value * 1e-6
        per_n = grid["bytes_per_rank"][str(b)][str(m)]
        sent = per_n[world_sizes.index(n)]
        t_lat, t_bw = alpha_beta_allreduce_time(sent, n, bw, lat)
        result = {"world_size": n, "num_params": m, "bytes_per_element": b, "message_bytes": m * b,
                  "bytes_per_rank": sent, "latency_s": t_lat, "bandwidth_s": t_bw, "time_s": t_lat + t_bw}
        summary.value = (
            f"<b>gradient</b> M = {format_bytes(m * b)} &nbsp;·&nbsp; "
            f"<b>sent per rank</b> {sent / (m * b):.4f} × M = {format_bytes(sent)}<br>"
            f"<b>time</b> ≈ {(t_lat + t_bw) * 1e3:.4g} ms = latency {t_lat * 1e3:.3g} ms + "
            f"bandwidth {t_bw * 1e3:.4g} ms ({'latency' if t_lat > t_bw else 'bandwidth'}-bound)"
        )
        fig = plot_allreduce_time(world_sizes, per_n, n, bw, lat, num_params=m, bytes_per_element=b)
        show_figures(out, [fig], dpi=100)
        box.last_result = result
        return result

    for w in (n_slider, p_slider, dtype, bw_slider, lat_slider):
        w.observe(update, names="value")
    box = W.VBox([n_slider, p_slider, dtype, bw_slider, lat_slider, summary, out])
    box.controls = {"world_size": n_slider, "num_params": p_slider, "bytes_per_element": dtype,
                    "bandwidth_gb_s": bw_slider, "latency_us": lat_slider}
    box.summary = summary
    box.update = update
    update()
    return box
