"""A job's extra dependencies: PEP 508 requirement strings and nothing else.

The broker's API checks them at submit (a 422 naming the item) and the runtime again before
it hands them to the installer, so neither an option (``-r FILE``, ``-e PATH``,
``--index-url``), nor a path, nor a URL ever reaches it: each reads host files or fetches and
builds code of the tenant's choosing. Direct references (``name @ https://...``) pass only
where the caller allows them (a profile whose index policy permits URLs).
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

#: at most this many requirements per job, each at most this long
MAX_DEPS = 256
MAX_DEP_CHARS = 200


class InvalidDeps(ValueError):
    """A dependency that is not a plain PEP 508 requirement; ``index`` says which one."""

    def __init__(self, index: int | None, message: str) -> None:
        super().__init__(message)
        self.index = index


def check_requirement(item: object, *, allow_urls: bool = False) -> str:
    """``item`` as a normalised requirement string, or InvalidDeps saying why not."""
    if not isinstance(item, str) or not item.strip():
        raise InvalidDeps(None, "deps: each item must be a non-empty string")
    if len(item) > MAX_DEP_CHARS:
        raise InvalidDeps(None, f"deps: longer than {MAX_DEP_CHARS} characters")
    text = item.strip()
    # a requirement starts with its name, so an installer option ("-r", "--index-url") or a
    # path ("./pkg", "/abs", "~/x") never parses; say so plainly rather than "invalid"
    if text[0] in "-./~\\":
        raise InvalidDeps(None, f"deps: {item!r} is an option or a path, not a requirement")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise InvalidDeps(None, f"deps: {item!r} is not a PEP 508 requirement ({exc})") from exc
    if req.url is not None and not allow_urls:
        raise InvalidDeps(None, f"deps: {item!r} names a URL; only index packages are allowed")
    return str(req)


def check_deps(
    items: list[object] | tuple[object, ...], *, allow_urls: bool = False
) -> tuple[str, ...]:
    """Every item checked (:func:`check_requirement`); InvalidDeps names the first bad one."""
    if len(items) > MAX_DEPS:
        raise InvalidDeps(None, f"deps: at most {MAX_DEPS} requirements")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(check_requirement(item, allow_urls=allow_urls))
        except InvalidDeps as exc:
            raise InvalidDeps(i, f"deps[{i}]: {str(exc).removeprefix('deps: ')}") from None
    return tuple(out)
