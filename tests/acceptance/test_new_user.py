"""The first hour of a new user, scripted: a fresh virtualenv, this checkout installed with pip, a
brand-new ``startproject`` built from the tutorial's blocks (extracted from docs/tutorial.md, so the
two cannot drift; the README's Quick start is part of it: tests/unit/test_docs.py), its first job,
its first dead letter, ``manage.py check``, ``deadletters list`` and the project's own tests, under
Django's runner and under pytest."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.acceptance.packaging import QUICKSTART, once_per_run, quickstart_blocks, run
from tests.conftest import ROOT

pytestmark = [pytest.mark.acceptance, once_per_run]

#: The interpreter of the project's virtualenv: this test run's, or JOBS_NEW_USER_PYTHON to try another.
PYTHON = os.environ.get("JOBS_NEW_USER_PYTHON", sys.executable)
#: The Redis the tutorial's settings name; the test points the project at its own database instead.
README_REDIS = "redis://localhost:6379/0"
#: Whom the project's invoices were mailed to, as the project's own shell reports it.
SENT = "from billing.models import Invoice; print([i.email for i in Invoice.objects.exclude(sent_at=None)])"


#: The shell lines fed to Python's interactive console one by one, as a paste is: a line it cannot
#: compile or run fails the command.
PASTE = """
import code, sys
console, failed = code.InteractiveConsole(), []
console.showsyntaxerror = console.showtraceback = lambda *args, **kwargs: failed.append(args)
for line in open("pasted.txt").read().splitlines() + [""]:
    console.push(line)
sys.exit(f"the pasted lines failed: {failed}" if failed else 0)
"""

#: The tutorial's commands this test runs (with its own flags added): the tutorial must still say them,
#: and its blocks marked ``<!-- run: new-user -->`` may say only these (tests/unit/test_docs.py).
COMMANDS = [
    "django-admin startproject mysite .",
    "python manage.py startapp billing",
    "python manage.py makemigrations billing && python manage.py migrate",
    "python manage.py check",
    "python manage.py runjobs --burst",
    "python manage.py deadletters list",
    "pip install pytest pytest-django",
    "python manage.py test",
    "pytest",
]


def test_the_tutorial_still_gives_the_commands_this_test_runs():
    tutorial = QUICKSTART.read_text()
    assert [command for command in COMMANDS if command not in tutorial] == []


def _environment(venv: Path) -> dict[str, str]:
    """A shell's environment with the venv activated, and nothing of this test suite's settings."""
    ours = ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "JOBS_TEST_")
    env = {key: value for key, value in os.environ.items() if not key.startswith(ours)}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}


def _write_project(project: Path, redis_url: str) -> str:
    """Write the Quick start's files into ``project``; return the code it pastes into the shell."""
    shell = ""
    for target, append, body in quickstart_blocks():
        if target == "shell":
            shell = body
            continue
        if README_REDIS in body:
            body = body.replace(README_REDIS, redis_url)
        path = project / target
        with path.open("a" if append else "w") as file:
            file.write(("\n" + body) if append else body)
    settings = (project / "mysite" / "settings.py").read_text()
    assert redis_url in settings and shell, "the tutorial lost its settings or its shell lines"
    return shell


def _django_says(python: Path, project: Path, env: dict[str, str], code: str) -> str:
    return run([str(python), "manage.py", "shell", "-v", "0", "-c", code], cwd=project, env=env).strip()


def test_a_new_project_built_from_the_quick_start_runs_its_jobs(wheel: Path, tmp_path: Path, redis_url: str):
    venv, project = tmp_path / "venv", tmp_path / "project"
    run([PYTHON, "-m", "venv", str(venv)], cwd=tmp_path)
    env, python = _environment(venv), venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, env=env, timeout=600)
    project.mkdir()
    run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], cwd=project, env=env)
    manage = [str(python), "manage.py"]
    run([*manage, "startapp", "billing"], cwd=project, env=env)
    shell = _write_project(project, redis_url)
    run([*manage, "makemigrations", "billing"], cwd=project, env=env)
    run([*manage, "migrate", "-v", "0"], cwd=project, env=env)

    checked = run([*manage, "check"], cwd=project, env=env)
    assert "System check identified no issues (0 silenced)." in checked, checked

    (project / "pasted.txt").write_text(shell)  # into manage.py shell, line by line as a person pastes
    run([*manage, "shell", "-v", "0", "-c", PASTE], cwd=project, env=env)
    worker = run([*manage, "runjobs", "--burst"], cwd=project, env=env, timeout=120)
    sent = _django_says(python, project, env, SENT)
    assert sent == "['ada@example.com']", worker
    dead = run([*manage, "deadletters", "list"], cwd=project, env=env)
    assert "billing.send_invoice" in dead and "InvoiceVoided" in dead, dead

    tested = run([*manage, "test", "-v", "1"], cwd=project, env=env)  # no pytest installed yet
    assert "Ran 2 tests" in tested and "OK" in tested, tested  # the TestCase; the pytest test is pytest's
    run([str(python), "-m", "pip", "install", "-q", "pytest>=8.3,<10", "pytest-django>=4.9,<5"],
        cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    pytested = run([str(venv / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"], cwd=project, env=env)
    assert "3 passed" in pytested, pytested

    run([*manage, "jobs_deploy", "alerts", "--output", "alerts.yml"], cwd=project, env=env)
    shipped = (ROOT / "django_jobs" / "deploy" / "prometheus" / "alerts.yml").read_text()
    assert (project / "alerts.yml").read_text() == shipped
