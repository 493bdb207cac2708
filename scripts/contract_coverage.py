"""Which contract ids of CONTRACTS.md no test names.

Usage: ``python scripts/contract_coverage.py [--spec PATH] [--strict]``. Reads every
``C7.x-n`` id defined in the spec (``**C7.x-n**``), then every id named in a test
docstring under ``tests/``, and prints the ids no test names, minus the ones listed in
``NOT_APPLICABLE`` below with their reason. ``--strict`` exits 1 when any id is uncovered.

The spec is the team's ``../shared/spec/CONTRACTS.md`` when that is beside the checkout,
else the pinned copy ``tests/data/CONTRACTS.md`` that every clone has (a test keeps the copy
equal to the shared file wherever both exist).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_SPEC = ROOT.parent / "shared" / "spec" / "CONTRACTS.md"
PINNED_SPEC = ROOT / "tests" / "data" / "CONTRACTS.md"
DEFINED = re.compile(r"\*\*(C7\.\d+-\d+[a-z]?)\*\*")
NAMED = re.compile(r"\bC7\.\d+-\d+[a-z]?\b")

# Ids that cannot apply to Python, with the reason (none so far).
NOT_APPLICABLE: dict[str, str] = {}


def defined_ids(spec: Path) -> list[str]:
    seen: dict[str, None] = {}
    for match in DEFINED.finditer(spec.read_text(encoding="utf-8")):
        seen.setdefault(match.group(1), None)
    return list(seen)


def named_ids(tests: Path) -> dict[str, list[str]]:
    """Contract ids named in test docstrings (module, class, function), with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [
            tree,
            *(
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            ),
        ]
        for node in nodes:
            doc = ast.get_docstring(node)
            if not doc:
                continue
            name = getattr(node, "name", "<module>")
            for cid in NAMED.findall(doc):
                found.setdefault(cid, []).append(f"{path.relative_to(ROOT)}::{name}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", type=Path, default=None)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    spec: Path | None = args.spec
    if spec is None:
        spec = next((p for p in (SHARED_SPEC, PINNED_SPEC) if p.is_file()), None)
        if spec is None:
            print(f"no spec: neither {SHARED_SPEC} nor {PINNED_SPEC} exists; pass --spec PATH")
            return 2
    elif not spec.is_file():
        print(f"no spec at {spec}")
        return 2
    print(f"spec: {spec}")
    ids = defined_ids(spec)
    named = named_ids(ROOT / "tests")
    missing = [c for c in ids if c not in named and c not in NOT_APPLICABLE]
    covered = len(ids) - len(missing) - len([c for c in ids if c in NOT_APPLICABLE])
    print(f"{covered}/{len(ids)} contract ids are named by a test docstring")
    for cid, reason in NOT_APPLICABLE.items():
        print(f"not applicable: {cid}: {reason}")
    if missing:
        print("no test names: " + ", ".join(missing))
    unknown = sorted(set(named) - set(ids))
    if unknown:
        print("tests name ids the spec does not define: " + ", ".join(unknown))
    return 1 if args.strict and missing else 0


if __name__ == "__main__":
    sys.exit(main())
