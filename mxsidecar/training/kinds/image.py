"""Images (``add_image``, ``add_images``, ``add_figure``): layouts, dtypes, value ranges.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/image.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls

__all__ = ["ImageCalls"]


class ImageCalls(KindCalls):
    # -- images, video, audio -------------------------------------------------
    def add_image(
        self,
        tag: str,
        image: Any,
        global_step: int | None = None,
        dataformats: str | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log an image, or a batch of images as one grid (TensorBoard's Images tab).

        Parameters
        ----------
        tag : str
            Name of the image series.
        image : NDArray or numpy array
            float16/32/64 with values in [0, 1], or uint8; 1 (gray), 3 (RGB) or 4 (RGBA)
            channels.  A batch becomes one grid, ``ceil(sqrt(N))`` images per row with
            2-pixel gaps (mxboard's ``make_image_grid``).  Converted and PNG-encoded in
            the sidecar.
        global_step, walltime
            As for :meth:`add_scalar`.
        dataformats : 'CHW', 'HWC', 'HW', 'NCHW', 'NHWC' or None
            The layout of ``image``; None takes mxboard's by rank: HW, CHW, NCHW.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        part = self._image_part("image", image)
        fmt = v.check_dataformats(dataformats, part.shape)
        self._pipe.submit_array(Kind.IMAGE, tag, step, wall, [part], options={"dataformats": fmt})

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """Log a batch of images as one grid (tensorboardX's name and argument order).

        ``img_tensor`` is NCHW (or NHWC with ``dataformats='NHWC'``); see :meth:`add_image`.
        """
        if dataformats not in ("NCHW", "NHWC"):
            raise ValueError(f"dataformats of add_images must be 'NCHW' or 'NHWC', got {dataformats!r}")
        self.add_image(tag, img_tensor, global_step, dataformats, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """Log a matplotlib figure (or a list of same-sized figures, as a grid) as an image.

        The figure is rasterised here, in the caller: a Figure cannot cross to another
        process without pickling it, so Agg draws it into an RGBA array (the costly
        part, which matplotlib does in any writer) and the PNG encoding is the sidecar's.
        ``close`` closes the figures afterwards, as tensorboardX does.
        """
        figures = list(figure) if isinstance(figure, (list, tuple)) else [figure]
        if not figures or not all(hasattr(f, "canvas") and hasattr(f, "get_size_inches") for f in figures):
            raise TypeError(f"figure must be a matplotlib Figure or a list of them, got {type(figure).__name__}")
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        arrays = []
        for f in figures:
            canvas: Any = FigureCanvasAgg(f)  # matplotlib is untyped, and optional
            canvas.draw()
            arrays.append(np.asarray(canvas.buffer_rgba()).copy())
        if close:
            import matplotlib.pyplot as plt

            for f in figures:
                plt.close(f)
        if len(arrays) == 1:
            self.add_image(tag, arrays[0], global_step, "HWC", walltime)
        else:
            if len({a.shape for a in arrays}) != 1:
                raise ValueError("figures in one add_figure call must all have the same size in pixels")
            self.add_image(tag, np.stack(arrays), global_step, "NHWC", walltime)
