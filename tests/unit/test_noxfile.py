"""The test matrix CI runs (noxfile.py): every supported Django against every supported database."""

from __future__ import annotations

import ast
import runpy
from typing import Any

import pytest

from tests.conftest import ROOT


def constant(name: str) -> Any:
    """A constant of noxfile.py read from the source: nox itself is not installed in the test sessions."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        names = [target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
        if isinstance(node, ast.Assign) and names == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


def matrix() -> list[tuple[str, str, dict[str, list[str]]]]:
    return constant("MATRIX")


def test_every_django_in_the_matrix_runs_against_sqlite_and_postgresql():
    runs = {django: set(databases) for _python, django, databases in matrix()}
    assert runs == {django: {"sqlite", "postgres"} for django in runs}
    assert any(django.startswith("django>=6.0") for django in runs)


def selections() -> list[tuple[str, list[str]]]:
    """(database, pytest arguments) of every run in the matrix."""
    return [(db, selected) for _python, _django, databases in matrix() for db, selected in databases.items()]


def runs(db: str, selected: list[str], module: str) -> bool:
    """Whether a run with these pytest arguments collects ``module`` (a path below the root)."""
    ignored = [arg.removeprefix("--ignore=") for arg in selected if arg.startswith("--ignore=")]
    paths = [arg.split("::")[0] for arg in selected if not arg.startswith("-")]
    return any(module == p or module.startswith(p + "/") for p in paths) and module not in ignored


def test_every_django_runs_the_unit_tests_once_and_the_in_process_tests_on_postgresql():
    for _python, django, databases in matrix():
        with_unit = [db for db, selected in databases.items() if "tests/unit" in selected]
        assert len(with_unit) == 1, django
        assert "tests/integration" in databases["postgres"], django
    newest = matrix()[-1][2]
    assert "tests/integration" in newest["sqlite"]  # and on SQLite with the newest Django


def test_every_test_runs_somewhere():
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    assert len(modules) > 50
    unrun = [m for m in modules if not any(runs(db, selected, m) for db, selected in selections())]
    assert unrun == []
    postgres = {arg for db, selected in selections() if db == "postgres" for arg in selected}
    about_the_server = {
        "tests/acceptance/test_nothing_lost.py::test_a_database_outage_is_retried_and_its_dead_letter_written_once_the_database_returns",
        "tests/acceptance/test_failover.py",
        "tests/acceptance/test_partition.py::test_a_host_cut_off_from_its_database_finishes_each_job_once",
    }
    assert about_the_server <= postgres


def test_the_tasks_backport_is_installed_beside_django_5_2_only():
    beside = constant("BESIDE")
    djangos = [django for _python, django, _databases in matrix()]
    assert set(beside) == {django for django in djangos if django.startswith("django>=5.2")}
    assert beside["django>=5.2,<5.3"] == ["django-tasks>=0.12,<0.13"]


def test_the_runs_at_once_share_no_redis_database_and_no_test_database():
    """A session runs its databases in parallel: no two runs of the matrix share a Redis database or a
    test database (nor do they with the demo, which .ci/run checks next)."""
    runs = [(django, db) for _python, django, databases in matrix() for db in databases]
    redis_dbs = constant("REDIS_DBS")
    assert len(redis_dbs) >= len(runs) and len(set(redis_dbs)) == len(redis_dbs)
    assert 12 not in redis_dbs  # the demo's, which .ci/run checks right after
    assert '"JOBS_TEST_NAME": _name(django, db)' in (ROOT / "noxfile.py").read_text()


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_each_run_name_has_test_databases_of_its_own(db, monkeypatch):
    monkeypatch.setenv("JOBS_TEST_DB", db)
    names = []
    for run in ("django52_" + db, "django60_" + db):
        monkeypatch.setenv("JOBS_TEST_NAME", run)
        databases = runpy.run_path(str(ROOT / "tests" / "settings.py"))["DATABASES"]
        names += [databases[alias]["TEST"]["NAME"] for alias in ("default", "other")]
    assert len(set(names)) == 4
