"""A griffe extension for the SDK reference: stoker's docstrings cross-reference in
reStructuredText roles (``:class:`Client```, ``:meth:`jobs```), which Markdown would show
raw; each becomes inline code (``~a.b.C`` as ``C``, as Sphinx shows it)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class RolesAsCode(griffe.Extension):
    """Rewrites every object's docstring once the tree is built."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
