"""A job's extra dependencies: PEP 508 requirement strings and nothing else.

The broker's API checks them at submit (a 422 naming the item) and the runtime again before
it hands them to the installer, so neither an option (``-r FILE``, ``-e PATH``,
``--index-url``), nor a path, nor a URL ever reaches it: each reads host files or fetches and
builds code of the tenant's choosing. Nor does an item that looks like a file (a path
separator, or a name ending like an archive or a wheel: ``foo.tar.gz``,
``foo-1.0-py3-none-any.whl``): a valid PEP 508 name to ``packaging``, but the installer
reads it as a path relative to its working directory. Direct references
(``name @ https://...``) pass only where the caller allows them (a profile whose index
policy permits URLs).
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

#: at most this many requirements per job, each at most this long
MAX_DEPS = 256
MAX_DEP_CHARS = 200
#: how an sdist, a wheel or an egg ends: an item named so is read as a local file
FILE_SUFFIXES = (".whl", ".egg", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz")
FILE_SUFFIXES += (".tar.xz", ".txz", ".tar.lz", ".tlz", ".tar.lzma", ".tar.zst")


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
    # the requirement before its URL and markers: a URL's slashes are the URL's
    if any(sep in text.partition(";")[0].partition("@")[0] for sep in "/\\"):
        raise InvalidDeps(None, f"deps: {item!r} looks like a file (a path separator)")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise InvalidDeps(None, f"deps: {item!r} is not a PEP 508 requirement ({exc})") from exc
    suffix = next((x for x in FILE_SUFFIXES if req.name.lower().endswith(x)), None)
    if suffix is not None:
        # PEP 503 names are equal with '-' for '.': a package so named is still reachable
        raise InvalidDeps(
            None,
            f"deps: {item!r} looks like a file (a name ending {suffix}, an archive or wheel);"
            f" a package so named is the same written with '-' for '.'",
        )
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
