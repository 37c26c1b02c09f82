"""The test matrix: each supported Django on the Python it is tested with, on SQLite and PostgreSQL."""

import os
import re
import subprocess

import nox

nox.options.sessions = ["lint", "docs", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# (python, django, {database: the tests it runs}). Every supported Django runs against both databases:
# a Django release changes the ORM and the backends. The unit tests touch no database: each Django runs
# them once. The in-process tests (tests/integration: django_jobs' own ORM calls, in transactions, on
# the real servers) run on PostgreSQL, the database of production, with every Django, and on SQLite too
# with the newest. The process-level tests (runjobs subprocesses, browsers, Prometheus, the fuzz test, a
# new project) exercise the worker, which is the same code on either Django: each runs once, on SQLite
# with 5.2 (which so runs its jobs on SQLite end to end) unless its subject is the database server
# itself (a database outage, the ledger through a failover or a Redis that lost its data, a host cut
# off from its database: PostgreSQL with 6.0), or it balances the runs. The databases of a session
# run in parallel (see tests()), so a session costs about its longer run: the runs are spread so
# that the two of a session take about as long as each other.
MATRIX = [
    (  # the LTS on the oldest Python we support
        "3.11",
        "django>=5.2,<5.3",
        {
            "sqlite": [
                "tests/unit",
                "tests/acceptance",
                "--ignore=tests/acceptance/test_failover.py",
                "--ignore=tests/acceptance/test_new_user.py",
                "--ignore=tests/acceptance/test_redis_limits.py",
                "--ignore=tests/acceptance/test_flow_control.py",
                "--ignore=tests/acceptance/test_redis_lost.py",
            ],
            # the lifecycle state machine on PostgreSQL too: its ledger and dead letters use the database
            "postgres": [
                "tests/integration",
                "tests/browser",
                "tests/observability",
                "tests/fuzz/test_lifecycle_machine.py",
            ],
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
                "tests/acceptance/test_redis_lost.py",
                "tests/acceptance/test_partition.py::test_a_host_cut_off_from_its_database_finishes_each_job_once",
            ],
            "sqlite": [
                "tests/integration",
                "tests/fuzz",
                "tests/acceptance/test_new_user.py",
                "tests/acceptance/test_redis_limits.py",
                "tests/acceptance/test_flow_control.py",
            ],
        },
    ),
]
#: The Redis database of each run: scripts/test runs the sessions at once, so no two runs share one
#: (nor a test database: see _env).
REDIS_DBS = (15, 14, 13, 11)
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


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """The documentation site, as CI builds it: warnings are errors and every reference must resolve.
    A fresh environment each time (-E): a page that did not change still reports its warnings."""
    session.install("-e", ".[docs]")
    session.run("sphinx-build", "-E", "-W", "--keep-going", "-n", "-b", "html", "docs", "var/docs-html")


@nox.session
@nox.parametrize("python,django,databases", MATRIX, ids=["py3.11-django5.2", "py3.12-django6.0"])
def tests(session: nox.Session, django: str, databases: dict[str, list[str]]) -> None:
    """Each database's run in parallel: they share nothing (own Redis database, own test database).
    Tests named on the command line (``scripts/test tests/unit``) replace each run's own selection."""
    session.install("-e", ".[test]", django, *BESIDE.get(django, []))
    (first, first_tests), *others = databases.items()
    background = []
    for db, selected in others:
        log = open(f".nox/pytest-{_name(django, db)}.log", "w+")  # noqa: SIM115 - read back once the run is over
        command = ["python", "-m", "pytest", "-p", "no:cacheprovider", *(session.posargs or selected)]
        background.append((db, log, subprocess.Popen(command, env={**os.environ, **_env(session, django, db)},
                                                     stdout=log, stderr=subprocess.STDOUT)))  # fmt: skip
    failed, first_run = [], ["python", "-m", "pytest", *(session.posargs or first_tests)]
    try:
        session.run(*first_run, env=_env(session, django, first))
    finally:  # the other runs are waited for and shown even when the first failed
        for db, log, process in background:
            code = process.wait()
            log.seek(0)
            print(f"--- pytest on {db} ---\n{log.read()}")
            failed += [f"pytest on {db} failed (exit {code})"] if code else []
    if failed:
        session.error("; ".join(failed))


def _env(session: nox.Session, django: str, db: str) -> dict[str, str]:
    runs = [(django, db) for _python, django, databases in MATRIX for db in databases]
    return {
        "PATH": f"{session.bin}{os.pathsep}{os.environ['PATH']}",
        "JOBS_TEST_DB": db,
        "JOBS_TEST_NAME": _name(django, db),
        "JOBS_TEST_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DBS[runs.index((django, db))]}",
    }


def _name(django: str, db: str) -> str:
    """``django52_sqlite``: the run's test databases are named after it (tests/settings.py)."""
    return re.sub(r"\W", "", django.split(",")[0]) + "_" + db
