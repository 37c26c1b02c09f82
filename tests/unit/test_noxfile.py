"""The test matrix CI runs (noxfile.py): every supported Django against every supported database."""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def matrix() -> list[tuple[str, str, str]]:
    """``MATRIX`` read from the source: nox itself is not installed in the test sessions."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        names = [target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
        if isinstance(node, ast.Assign) and names == ["MATRIX"]:
            return ast.literal_eval(node.value)
    raise AssertionError("noxfile.py defines no MATRIX")


def test_every_django_in_the_matrix_runs_against_sqlite_and_postgresql():
    runs = {django: set(databases.split(",")) for _python, django, databases in matrix()}
    assert runs == {django: {"sqlite", "postgres"} for django in runs}
    assert any(django.startswith("django>=6.0") for django in runs)
