"""A griffe extension for `make docs`: the package's docstrings, written for Sphinx and
doctest, read as Markdown by mkdocstrings.

* a doctest (``>>>`` lines and the output after them, up to a blank line) becomes a
  ``pycon`` code block: as plain Markdown its ``[...]`` output would be taken for links;
* a Sphinx role (``:class:`X```, ``:func:``, ``:mod:``, ``:data:``, ``:meth:``, ``:attr:``)
  becomes inline code ``X``.

The docstrings themselves stay as they are: ``make test`` runs their doctests.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|mod|data|meth|attr|exc|obj):`~?([^`]+)`")


def markdown(text: str) -> str:
    """``text`` with its doctests fenced and its Sphinx roles made inline code."""
    out, in_doctest = [], False
    for line in text.splitlines():
        starts = line.lstrip().startswith(">>>")
        if starts and not in_doctest:
            out.append("```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        out.append(line if in_doctest else _ROLE.sub(r"`\1`", line))
    if in_doctest:
        out.append("```")
    return "\n".join(out)


class SphinxDocstrings(griffe.Extension):
    """Rewrites each docstring once it is loaded (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
