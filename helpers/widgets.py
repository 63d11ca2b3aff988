"""Interactive explorers for the chapters (ipywidgets).

Each explorer is a function returning an :class:`ipywidgets.VBox` that also
carries an ``update()`` method. ``update()`` recomputes the numbers and redraws
the figure from the current slider values and returns the numbers as a dict,
so the explorer can be driven headless (nbval, tests) exactly as a reader's
slider drag would drive it. The explorer draws once when it is built.
"""
from __future__ import annotations

import io
from typing import Any

import ipywidgets as W
from IPython.display import Image, display

from helpers.costs import ring_allreduce_bytes
from helpers.plots import alpha_beta_allreduce_time, format_bytes, plot_allreduce_time

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

    Controls: world size N, parameter count (log slider), bytes per element,
    link bandwidth (GB/s, 1 GB = 1e9 B) and per-message latency alpha (µs).
    Shows the bytes each rank sends, 2(N-1)/N · M, the predicted time split into
    its latency and bandwidth terms, and a plot of time against N.
    """
    if bytes_per_element not in _DTYPES.values():
        raise ValueError(f"bytes_per_element must be one of {sorted(_DTYPES.values())}")
    style = {"description_width": "150px"}
    layout = W.Layout(width="520px")
    n_slider = W.IntSlider(value=world_size, min=2, max=1024, description="world size N", style=style,
                           layout=layout, continuous_update=False)
    p_slider = W.FloatLogSlider(value=num_params, base=10, min=5, max=12, step=0.05,
                                description="parameters", style=style, layout=layout,
                                continuous_update=False, readout_format=".3g")
    dtype = W.Dropdown(options=list(_DTYPES.items()), value=bytes_per_element, description="gradient dtype",
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
        n, m = int(n_slider.value), int(round(p_slider.value))
        b = int(dtype.value)
        bw, lat = bw_slider.value * 1e9, lat_slider.value * 1e-6
        sent = ring_allreduce_bytes(m, b, n)
        t_lat, t_bw = alpha_beta_allreduce_time(m, b, n, bw, lat)
        result = {"world_size": n, "num_params": m, "bytes_per_element": b, "message_bytes": m * b,
                  "bytes_per_rank": sent, "latency_s": t_lat, "bandwidth_s": t_bw, "time_s": t_lat + t_bw}
        summary.value = (
            f"<b>gradient</b> M = {format_bytes(m * b)} &nbsp;·&nbsp; "
            f"<b>sent per rank</b> 2(N−1)/N · M = {2 * (n - 1) / n:.4f} × M = {format_bytes(sent)}<br>"
            f"<b>time</b> ≈ {(t_lat + t_bw) * 1e3:.4g} ms = latency {t_lat * 1e3:.3g} ms + "
            f"bandwidth {t_bw * 1e3:.4g} ms ({'latency' if t_lat > t_bw else 'bandwidth'}-bound)"
        )
        fig = plot_allreduce_time(m, b, n, bw, lat, max_world_size=1024)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=100)  # a PNG needs no matplotlib backend in the kernel
        with out:
            out.clear_output(wait=True)
            display(Image(data=png.getvalue(), format="png"))
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
