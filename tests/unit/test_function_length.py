"""No function in the package is 50 lines or longer: a long function hides the steps it is made of."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_jobs"
LIMIT = 50


def long_functions(root: Path = PACKAGE) -> list[str]:
    """Every function (nested ones and methods included) of ``LIMIT`` lines or more, longest first."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines >= LIMIT:
                    found.append((lines, f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"))
    return [f"{where} ({lines} lines)" for lines, where in sorted(found, reverse=True)]


def test_no_function_is_50_lines_or_longer():
    offenders = long_functions()
    assert not offenders, f"functions of {LIMIT} lines or more:\n" + "\n".join(offenders)


def test_the_count_sees_nested_functions_and_methods(tmp_path):
    body = "\n".join(f"            x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "module.py").write_text(f"class C:\n    def method(self):\n        def inner():\n{body}\n")
    assert [line.split()[1] for line in long_functions(tmp_path)] == ["method", "inner"]
