"""The test matrix: each supported Django on the Python it is tested with, on SQLite and PostgreSQL."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

MATRIX = [
    ("3.11", "django>=5.2,<5.3"),  # the LTS on the oldest Python we support
    ("3.12", "django>=6.0,<6.1"),  # the newest Django that django-prometheus 2.5 allows
]


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "django_jobs")
    session.run("mypy", "django_jobs")


@nox.session
@nox.parametrize("python,django", MATRIX, ids=["py3.11-django5.2", "py3.12-django6.0"])
def tests(session: nox.Session, django: str) -> None:
    session.install("-e", ".[test]", django)
    args = session.posargs or []
    for db, redis_db in (("sqlite", 15), ("postgres", 14)):
        session.run(
            "python", "-m", "pytest", *args,
            env={"JOBS_TEST_DB": db, "JOBS_TEST_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}"},
        )  # fmt: skip
