"""The test matrix: each supported Django on the Python it is tested with, on SQLite and PostgreSQL."""

import os
import subprocess

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# (python, django, {database: the tests it runs}). Every supported Django runs against both databases:
# a Django release changes the ORM and the backends, so SQLite alone would leave PostgreSQL untested on
# it. Every Django runs the in-process tests (tests/unit, tests/integration: django_jobs' own ORM
# calls) on both databases. The process-level tests (runjobs subprocesses, browsers, Prometheus, the
# fuzz test, a new project) exercise the worker, which is the same code on either Django: each runs
# once, spread over the four runs so that each takes about as long as the others; the ones whose
# subject is the database server itself (a database outage, the ledger through a failover, a host cut
# off from its database) run on PostgreSQL with 6.0. The databases of a session run in parallel (see
# tests()), so a session costs about its longest run, and the suite stays within its time budget.
MATRIX = [
    (  # the LTS on the oldest Python we support
        "3.11",
        "django>=5.2,<5.3",
        {
            "sqlite": [
                "tests/unit",
                "tests/integration",
                "tests/acceptance",
                "--ignore=tests/acceptance/test_failover.py",
                "--ignore=tests/acceptance/test_new_user.py",
            ],
            "postgres": ["tests/unit", "tests/integration", "tests/browser", "tests/observability"],
        },
    ),
    (  # the newest Django that django-prometheus 2.5 allows
        "3.12",
        "django>=6.0,<6.1",
        {
            "postgres": [
                "tests/unit",
                "tests/integration",
                "tests/acceptance/test_nothing_lost.py::test_a_database_outage_is_retried_and_its_dead_letter_written_once_the_database_returns",
                "tests/acceptance/test_failover.py",
                "tests/acceptance/test_partition.py::test_a_host_cut_off_from_its_database_finishes_each_job_once",
            ],
            "sqlite": ["tests/unit", "tests/integration", "tests/fuzz", "tests/acceptance/test_new_user.py"],
        },
    ),
]
REDIS_DB = {"sqlite": 15, "postgres": 14}
# Installed beside a Django: on 5.2 the backport of Django 6.0's django.tasks, for the Tasks backend's
# tests (they skip without a Tasks framework). Not on 6.0, which tests its own django.tasks.
BESIDE = {"django>=5.2,<5.3": ["django-tasks>=0.12,<0.13"]}


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "django_jobs")
    session.run("mypy", "django_jobs")
    session.run("lint-imports")


@nox.session
@nox.parametrize("python,django,databases", MATRIX, ids=["py3.11-django5.2", "py3.12-django6.0"])
def tests(session: nox.Session, django: str, databases: dict[str, list[str]]) -> None:
    """Each database's run in parallel: they share nothing (own Redis database, own test database).
    Tests named on the command line (``scripts/test tests/unit``) replace each run's own selection."""
    session.install("-e", ".[test]", django, *BESIDE.get(django, []))
    (first, first_tests), *others = databases.items()
    background = []
    for db, selected in others:
        log = open(f".nox/pytest-{db}.log", "w+")  # noqa: SIM115 - read back once the run is over
        command = ["python", "-m", "pytest", "-p", "no:cacheprovider", *(session.posargs or selected)]
        background.append((db, log, subprocess.Popen(command, env={**os.environ, **_env(session, db)},
                                                     stdout=log, stderr=subprocess.STDOUT)))  # fmt: skip
    session.run("python", "-m", "pytest", *(session.posargs or first_tests), env=_env(session, first))
    for db, log, process in background:
        code = process.wait()
        log.seek(0)
        print(f"--- pytest on {db} ---\n{log.read()}")
        if code:
            session.error(f"pytest on {db} failed (exit {code})")


def _env(session: nox.Session, db: str) -> dict[str, str]:
    return {
        "PATH": f"{session.bin}{os.pathsep}{os.environ['PATH']}",
        "JOBS_TEST_DB": db,
        "JOBS_TEST_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB[db]}",
    }
