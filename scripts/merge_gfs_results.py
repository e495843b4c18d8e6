"""Merge the policies of one ``stoker sim gfs`` results.json into another.

Used to add policies to docs/gfs/results.json without rerunning the others: run
``stoker sim gfs`` with the same settings and only the new policies into a temporary
folder, then ``python scripts/merge_gfs_results.py docs/gfs/results.json NEW/results.json``.
The two runs must have the same ``meta`` (setup, trace, window, loads; ``note`` aside),
and no policy may be in both under one load: a rerun of a policy is not merged silently.
The target is rewritten in place (same format as ``stoker sim gfs`` writes), with the
merged policies named in ``meta.note``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def merge(base: dict, new: dict) -> list[str]:
    """Add ``new``'s per-load policies to ``base`` (in place); the names added."""
    keep = {k: v for k, v in base["meta"].items() if k != "note"}
    other = {k: v for k, v in new["meta"].items() if k != "note"}
    if keep != other:
        diff = sorted(k for k in keep.keys() | other.keys() if keep.get(k) != other.get(k))
        raise ValueError(f"meta differs in {', '.join(diff)}: not the same setup")
    added: list[str] = []
    for load, policies in new["results"].items():
        into = base["results"].setdefault(load, {})
        both = sorted(set(into) & set(policies))
        if both:
            raise ValueError(f"results.{load}: already has {', '.join(both)}")
        into.update(policies)
        added.extend(p for p in policies if p not in added)
    return added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="results.json to add to (rewritten)")
    parser.add_argument("new", type=Path, help="results.json with the policies to add")
    args = parser.parse_args()
    base = json.loads(args.target.read_text())
    try:
        added = merge(base, json.loads(args.new.read_text()))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    note = base["meta"].get("note")
    extra = f"{', '.join(added)} merged from a separate run of the same command"
    base["meta"]["note"] = f"{note}; {extra}" if note else extra
    args.target.write_text(json.dumps(base, indent=2, sort_keys=True) + "\n")
    print(f"added {', '.join(added)} to {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
