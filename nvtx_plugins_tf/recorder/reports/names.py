"""How the reports name ranges: the name ``--domain`` gives NVTX's default domain
(:data:`DEFAULT_DOMAIN`), families of numbered names sharing a row (:func:`group_names`),
long names shortened in tables (:func:`shorten`). A range's ``domain:message`` label itself
is :func:`~..recording.model.range_label`, which nsys's exports are read with too
(:mod:`..nsys_inputs`).

Every report (:mod:`.summary`, :mod:`.nsys_reports`, :mod:`.pairs`) names ranges through
these, so that one range has one name in all of them.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["DEFAULT_DOMAIN", "GROUP_MIN", "NAME_WIDTH", "group_names", "selects_domain", "shorten"]

GROUP_MIN = 10  # names in a numbered family before they share a row
NAME_WIDTH = 100  # characters of a name in the table

_NUMBERED = re.compile(r"^(.*\S)\s+\d+$")
# TraceMe encodes metadata as 'name#key=value,...#'; TensorFlow's NVTX names put a ':' between
# (TSL's 'XlaPass:#name=...#'), which is no part of the row name.
_TRACEME_METADATA = re.compile(r"^(.+?):?#.*#$")


def group_names(labels: list[str]) -> list[str]:
    """The row name of each label: numbered families of GROUP_MIN or more names become
    'name *', TraceMe-style metadata is dropped.

    >>> group_names([f"batch {i}" for i in range(12)])[:2] + group_names(["Dense 1", "Dense 2"])
    ['batch *', 'batch *', 'Dense 1', 'Dense 2']
    >>> group_names(["TSL:XlaPass:#name=cluster_0,step=1#", "TSL:XlaCompile:#module=m#"])
    ['TSL:XlaPass', 'TSL:XlaCompile']
    """
    bases = [_TRACEME_METADATA.sub(r"\1", label) for label in labels]
    families = Counter()
    for base in set(bases):
        match = _NUMBERED.match(base)
        if match:
            families[match.group(1)] += 1
    out = []
    for base in bases:
        match = _NUMBERED.match(base)
        out.append(f"{match.group(1)} *" if match and families[match.group(1)] >= GROUP_MIN else base)
    return out


def shorten(name: str, width: int = NAME_WIDTH) -> str:
    """``name`` cut in the middle (an ellipsis there) to ``width`` characters at most."""
    if len(name) <= width:
        return name
    half = (width - 1) // 2
    return name[:half] + "…" + name[len(name) - (width - 1 - half) :]


#: How ``--domain`` names NVTX's default domain (as nsys's ``--nvtx-domain-include`` does).
DEFAULT_DOMAIN = "default"


def selects_domain(domains, name: str | None) -> bool:
    """Whether a domain selection (a set of names, None = all) keeps the domain ``name``;
    NVTX's default domain ('' or None) is selected as :data:`DEFAULT_DOMAIN`."""
    return domains is None or (name or DEFAULT_DOMAIN) in domains
