"""The PNG timeline of a recording: where every box and label goes (:mod:`.layout`, no
drawing), and the rows kept during the one decode then drawn with matplotlib (:mod:`.render`).

The last layer: it reads through :mod:`..recording` and :mod:`..exports`; only the facade and
:mod:`..outputs` import it.
"""

from __future__ import annotations

from .layout import MatplotlibMissing
from .render import TimelineSink, render_timeline

__all__ = ["MatplotlibMissing", "TimelineSink", "render_timeline"]
