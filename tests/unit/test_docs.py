"""The documentation's sources: every code block is run by a test or marked as an excerpt, every link
resolves where the Markdown is rendered, and the reference pages name exactly what the code has.

The convention, an HTML comment on the line right before a fenced code block (invisible where the
Markdown is rendered; the site's extension labels the block "excerpt" or "tested" from it):

- ``<!-- excerpt -->``: a fragment, not run (it needs names it does not define, a server, a project);
- ``<!-- run: python -->``: plain Python, executed here as it stands;
- ``<!-- run: settings -->``: settings, executed here; what they define (``JOBS``, ``RQ_QUEUES``,
  ``DATABASES``, ``TASKS``) is validated as ``manage.py check`` would;
- ``<!-- run: manage -->``: ``python manage.py`` commands that need no server (and ``mkdir -p``), run
  here in a new directory with ``call_command``;
- ``<!-- run: new-user -->``: shell commands that ``tests/acceptance/test_new_user.py`` runs (each line
  is one of its ``COMMANDS``);
- ``<!-- quickstart: PATH -->``: a file of the tutorial's project, which that test writes and runs.

The site builds in its own step (``nox -s docs``, warnings as errors); these tests need no Sphinx.
"""

from __future__ import annotations

import ast
import codeop
import functools
import importlib.metadata
import importlib.util
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
from django.core.management import call_command
from django.db.utils import load_backend
from django.test import override_settings
from django.utils.module_loading import import_string

from tests.conftest import ROOT

DOCS = ROOT / "docs"
TUTORIAL = DOCS / "tutorial.md"
NEW_USER_TEST = ROOT / "tests" / "acceptance" / "test_new_user.py"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|:{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>excerpt|run:\s*\S+|quickstart:\s*[^>]+?)\s*-->\s*$")
_INCLUDE = re.compile(r"^```\{include\}\s+(?P<path>\S+)", re.MULTILINE)
#: Directives whose content is not Markdown: no code block is looked for inside them.
_OPAQUE = {"eval-rst", "include", "toctree", "jobs-metrics", "jobs-alerts"}
RUN_KINDS = {"run: python", "run: settings", "run: manage", "run: new-user"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    language: str
    marker: str  # "" when none: "excerpt", "run: python", "quickstart: billing/jobs.py", ...
    code: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def sources() -> list[Path]:
    """The site's Markdown: every page under docs/ and every file a page includes."""
    pages = sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith("_"))
    included = set()
    for page in pages:
        included |= {(page.parent / found["path"]).resolve() for found in _INCLUDE.finditer(page.read_text())}
    return pages + sorted(included)


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, inside directives too (not inside opaque ones)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    open_directives: list[tuple[str, int, str]] = []  # (fence character, fence length, directive)
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if open_directives and _closes(lines[i], open_directives[-1]):
            open_directives.pop()
        elif fence and not (open_directives and open_directives[-1][2] in _OPAQUE):
            info, opened = fence["info"].strip(), (fence["fence"][0], len(fence["fence"]))
            if info.startswith("{"):
                open_directives.append((*opened, info[1:].split("}")[0]))
            else:
                end = next(j for j in range(i + 1, len(lines)) if _closes(lines[j], opened))
                marker = _MARKER.match(lines[i - 1]) if i else None
                code = dedent("\n".join(lines[i + 1 : end])) + "\n"
                found.append(Block(path, i + 1, info.split()[0] if info else "", _kind(marker), code))
                i = end
        i += 1
    return found


def _closes(line: str, opened: tuple[Any, ...]) -> bool:
    char, length = opened[0], opened[1]
    stripped = line.strip()
    return len(stripped) >= length and set(stripped) == {char}


def _kind(marker: re.Match[str] | None) -> str:
    return re.sub(r":\s*", ": ", marker["kind"]) if marker else ""


ALL_BLOCKS = [block for path in sources() for block in blocks(path)]


def marked(kind: str) -> list[Block]:
    return [block for block in ALL_BLOCKS if block.marker == kind or block.marker.startswith(f"{kind}: ")]


# --- the convention ------------------------------------------------------------------------------


def test_the_site_has_code_blocks_of_every_kind():
    """The parser sees the blocks (a parser that saw none would pass every test below)."""
    assert len(ALL_BLOCKS) > 50
    assert {block.path for block in ALL_BLOCKS} >= {TUTORIAL, ROOT / "ARCHITECTURE.md"}
    assert all(marked(kind) for kind in [*RUN_KINDS, "quickstart", "excerpt"])


def test_every_code_block_is_run_or_marked_as_an_excerpt():
    unmarked = [f"{block} ({block.language or 'no language'})" for block in ALL_BLOCKS if not block.marker]
    assert not unmarked, "code blocks neither run nor marked <!-- excerpt -->:\n" + "\n".join(unmarked)


def test_every_marker_is_known_and_right_before_a_code_block():
    problems = []
    for path in sources():
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            found = _MARKER.match(line)
            if not found:
                continue
            kind = _kind(found)
            if kind != "excerpt" and kind not in RUN_KINDS and not kind.startswith("quickstart: "):
                problems.append(f"{path.relative_to(ROOT)}:{n + 1} unknown marker {kind!r}")
            if n + 1 >= len(lines) or not _FENCE.match(lines[n + 1]):
                problems.append(f"{path.relative_to(ROOT)}:{n + 1} marks no code block")
    assert not problems, "\n".join(problems)


def test_a_python_block_without_a_marker_fails_the_check(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```python\nprint(1)\n```\n\n<!-- excerpt -->\n```python\nx\n```\n")
    assert [(block.line, block.marker) for block in blocks(page)] == [(3, ""), (8, "excerpt")]


# --- the blocks that run here --------------------------------------------------------------------


@pytest.mark.parametrize("block", marked("run: python"), ids=str)
def test_python_blocks_run(block: Block):
    exec(compile(block.code, str(block), "exec"), {"__name__": "docs_block"})


@pytest.mark.parametrize("block", marked("run: settings"), ids=str)
def test_settings_blocks_are_valid_settings(block: Block):
    """Executed over a new project's settings, then checked: the values a page shows are valid."""
    namespace: dict[str, Any] = {
        "INSTALLED_APPS": ["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes"],
        "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}},
    }
    assigned = {
        target.id
        for node in ast.walk(ast.parse(block.code))
        if isinstance(node, ast.Assign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert assigned & {"JOBS", "RQ_QUEUES", "DATABASES", "TASKS"}, "the block sets nothing this test checks"
    exec(compile(block.code, str(block), "exec"), namespace)
    _check_settings(namespace)


def _check_settings(namespace: dict[str, Any]) -> None:
    from django_jobs import conf
    from django_jobs.core.connections import serializer_problem

    with override_settings(JOBS=namespace.get("JOBS", {})):
        assert conf.problems() == []
    for name, queue in namespace.get("RQ_QUEUES", {}).items():
        assert serializer_problem(queue) is None, name
    for database in namespace["DATABASES"].values():
        load_backend(database["ENGINE"])
    for alias, entry in namespace.get("TASKS", {}).items():
        from django_jobs.tasks.options import parse

        assert import_string(entry["BACKEND"])
        assert parse(alias, entry.get("OPTIONS", {})).problems == {}


@pytest.mark.parametrize("block", marked("run: manage"), ids=str)
def test_manage_blocks_run(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    for line in filter(None, (line.split("  #")[0].strip() for line in block.code.splitlines())):
        words = shlex.split(line)
        if words[:2] == ["mkdir", "-p"]:
            for folder in words[2:]:
                Path(folder).mkdir(parents=True, exist_ok=True)
            continue
        assert words[:2] == ["python", "manage.py"], f"{block}: {line!r} is no manage.py command"
        call_command(*words[2:])
        if "--output" in words:
            assert Path(words[words.index("--output") + 1]).stat().st_size > 0, line


def _new_user_commands() -> list[str]:
    """``COMMANDS`` of the new-user acceptance test, read from its source (it needs a server to import)."""
    for node in ast.parse(NEW_USER_TEST.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["COMMANDS"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{NEW_USER_TEST} defines no COMMANDS")


@pytest.mark.parametrize("block", marked("run: new-user"), ids=str)
def test_new_user_blocks_are_commands_the_acceptance_test_runs(block: Block):
    lines = [line.split("  #")[0].strip() for line in block.code.splitlines()]
    assert [line for line in lines if line and line not in _new_user_commands()] == []


def test_quickstart_blocks_are_the_ones_the_acceptance_test_builds_its_project_from():
    from tests.acceptance.packaging import quickstart_blocks

    ours = marked("quickstart")
    assert {block.path for block in ours} == {TUTORIAL}
    assert [block.marker.removeprefix("quickstart: ").removesuffix(" (append)") for block in ours] == [
        target for target, _append, _body in quickstart_blocks()
    ]


def pasted(code: str) -> list[str]:
    """What an interactive Python shell says of ``code`` pasted into it line by line, without running
    it: the console's own rule (a compound statement ends at a blank line, not at a dedent)."""
    errors, buffer = [], []
    for number, line in enumerate(code.splitlines(), 1):
        buffer.append(line)
        try:
            complete = codeop.compile_command("\n".join(buffer), "<stdin>", "single")
        except SyntaxError as exc:
            errors.append(f"line {number}: {exc.msg}")
            complete = True  # the console drops what it could not compile
        if complete is not None:
            buffer = []
    return errors


def test_the_tutorials_shell_lines_paste_into_manage_py_shell():
    (shell,) = [block for block in marked("quickstart") if block.marker == "quickstart: shell"]
    assert pasted(shell.code) == []
    assert pasted("with x:\n    y()\nz()\n") == ["line 3: invalid syntax"]  # what it caught before


def test_the_readme_quick_start_is_part_of_the_tutorial():
    """What the README shows is what the acceptance test runs: each line of its Quick start's code
    blocks (comment lines aside) is a line of the tutorial's."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    quick_start = readme[start : readme.index("\n## ", start + 1)]
    tutorial = {line.strip() for block in blocks(TUTORIAL) for line in block.code.splitlines()}
    shown = re.findall(r"```\w*\n(.*?)```", quick_start, re.S)
    assert len(shown) >= 4
    lines = [line.strip() for code in shown for line in code.splitlines()]
    assert [line for line in lines if line and not line.startswith("#") and line not in tutorial] == []


# --- links ---------------------------------------------------------------------------------------

#: Where the Markdown is read: the site's sources, and the top-level files a code host shows.
LINKED = [*sources(), ROOT / "README.md", ROOT / "CHANGELOG.md"]
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def github_slug(heading: str) -> str:
    """A heading's anchor as a code host renders it (and as the site's MyST makes it)."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (code blocks left out: a "# comment" is no heading)."""
    text = re.sub(r"(?ms)^\s*(`{3,}).*?^\s*\1\s*$", "", path.read_text())
    return {github_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_their_anchors_resolve(path: Path):
    """Each relative link names a file that exists, and its #anchor a heading of that file, spelled as
    a code host spells it: the site checks its own links, this checks them where the files are read
    as they are (the README, on the package index and the code host)."""
    broken = []
    for found in _LINK.finditer(path.read_text()):
        target, _, anchor = found["target"].partition("#")
        if re.match(r"[a-z]+:", target) or target.startswith("{") or (not target and not anchor):
            continue
        linked = (path.parent / target).resolve() if target else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(found["target"])
    assert not broken, f"broken links in {path.relative_to(ROOT)}: {broken}"


# --- the reference pages against the code --------------------------------------------------------


@functools.cache
def _sources_module() -> Any:
    """The site extension's reader of the code (docs/_ext/jobs_sources.py), which needs no Sphinx."""
    spec = importlib.util.spec_from_file_location("jobs_sources", DOCS / "_ext" / "jobs_sources.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def entries(page: str, directive: str) -> list[str]:
    """The names of the ``{directive} NAME`` entries of a reference page."""
    text = (DOCS / "reference" / page).read_text()
    return re.findall(rf"^`{{3,}}\{{{directive}\}} (\S+)$", text, re.MULTILINE)


def test_the_checks_page_has_one_entry_per_check_the_code_reports():
    documented = entries("checks.md", "check")
    assert sorted(documented) == sorted(set(documented)) == sorted(_sources_module().check_ids())


def test_the_commands_page_has_one_entry_per_management_command():
    documented = entries("commands.md", "jobs-command")
    assert sorted(documented) == sorted(set(documented)) == _sources_module().command_names()


def test_the_metrics_reference_sees_every_metric_the_code_serves():
    """The reference reads metric declarations from the source; the registered objects say what the
    endpoints really serve, so a declaration the reader misses fails here."""
    from django_jobs.ops.collectors import JobsCollector, _replication_families
    from django_jobs.telemetry import metrics

    served = {f"{m._name}_total" if m._type == "counter" else m._name for m in metrics._ALL}
    families = [*JobsCollector._families(), *_replication_families(), *metrics.pause_families([], [], 0.0)]
    served |= {family.name for family in families}
    found = {metric.name for metric in _sources_module().metrics()}
    assert served <= found
    assert {metric.served for metric in _sources_module().metrics()} == {"worker", "web", "both"}


def test_each_command_option_is_read_from_its_parser():
    reader = _sources_module()
    runjobs = reader.command("runjobs")
    flags = {flag for option in runjobs.options for flag in option.flags}
    assert {"--concurrency", "--burst", "--burst-wait", "--max-jobs", "--metrics-port"} <= flags
    assert "--settings" not in flags and "--settings" not in runjobs.usage
    assert [sub.program for sub in reader.command("deadletters").subcommands] == [
        "deadletters list",
        "deadletters show",
        "deadletters requeue",
        "deadletters discard",
    ]


def test_one_version_for_the_package_the_site_and_the_changelog():
    """docs/conf.py reads its release from the installed package's metadata: it is pyproject's."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert importlib.metadata.version("django-durable-jobs") == declared
    assert 'installed_version("django-durable-jobs")' in (DOCS / "conf.py").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert releases[0] == "Unreleased" and declared in releases


def test_the_testing_guide_tells_to_give_tests_a_redis_database_of_their_own():
    """A development runjobs took a test's job and ran it against the development database: the
    guide says why tests need their own Redis database, and how."""
    guide = " ".join((DOCS / "howto" / "testing.md").read_text().split())
    assert "Give your tests a Redis database of their own" in guide
    assert "never the one a development `runjobs` serves" in guide
