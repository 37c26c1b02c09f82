"""The package as a user gets it: a wheel built from the checkout's current files, and the tutorial's
project (docs/tutorial.md). Shared by the packaging and new-user tests, which run once per test run (on the
SQLite leg): they test the package, not the database."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

once_per_run = pytest.mark.skipif(
    os.environ.get("JOBS_TEST_DB", "sqlite") != "sqlite",
    reason="tests the package, not the database: runs on the SQLite leg only",
)

#: ``<!-- quickstart: PATH -->`` or ``<!-- quickstart: PATH (append) -->`` right before a fenced block.
_BLOCK = re.compile(
    r"<!-- quickstart: (?P<target>[^ ]+?)(?P<append> \(append\))? -->\n```\w*\n(?P<body>.*?)```", re.S
)


#: The page whose marked blocks are the new project's files (the README's Quick start is part of it:
#: tests/unit/test_docs.py).
QUICKSTART = ROOT / "docs" / "tutorial.md"


def quickstart_blocks() -> list[tuple[str, bool, str]]:
    """(target, append?, text) of each marked block of the tutorial, in order."""
    text = QUICKSTART.read_text()
    return [(m["target"], bool(m["append"]), m["body"]) for m in _BLOCK.finditer(text)]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command; fail the test with its output if it fails."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output}"
    return output


def copy_checkout(dest: Path) -> Path:
    """The checkout's current files (tracked or new, not ignored), without its venv, logs or build."""
    listed = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def build_wheel(workdir: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the checkout (a build in place would race the other leg)."""
    source = copy_checkout(workdir / "src")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(workdir / "dist"), str(source)],
        cwd=workdir)  # fmt: skip
    (wheel,) = (workdir / "dist").glob("*.whl")
    return wheel
