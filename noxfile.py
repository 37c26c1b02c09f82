"""The test matrix: each supported Django on the Python it is tested with, on SQLite and PostgreSQL."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# (python, django, databases). The LTS runs against both databases; the newest Django against
# SQLite too, so the matrix stays within CI's time while every combination runs every test.
MATRIX = [
    ("3.11", "django>=5.2,<5.3", "sqlite,postgres"),  # the LTS on the oldest Python we support
    ("3.12", "django>=6.0,<6.1", "sqlite"),  # the newest Django that django-prometheus 2.5 allows
]
REDIS_DB = {"sqlite": 15, "postgres": 14}


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "django_jobs")
    session.run("mypy", "django_jobs")


@nox.session
@nox.parametrize("python,django,databases", MATRIX, ids=["py3.11-django5.2", "py3.12-django6.0"])
def tests(session: nox.Session, django: str, databases: str) -> None:
    session.install("-e", ".[test]", django)
    args = session.posargs or []
    for db in databases.split(","):
        redis_db = REDIS_DB[db]
        session.run(
            "python", "-m", "pytest", *args,
            env={"JOBS_TEST_DB": db, "JOBS_TEST_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}"},
        )  # fmt: skip
