"""The package's shape: no import cycle (lazy imports included), the import-linter contracts hold,
the public names import, and unit tests reach no server."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import grimp

import django_jobs

ROOT = Path(__file__).resolve().parents[2]


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle_among_the_package_modules_lazy_imports_included():
    graph = grimp.build_graph("django_jobs", cache_dir=None)  # function-local imports count too
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(module)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.d", imported="a.b")
    assert _cycles(graph) == [{"a.b", "a.c"}]


def test_the_import_linter_contracts_hold():
    # A subprocess: the linter's command line reconfigures logging for the whole process.
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_public_names_are_exported():
    from django_jobs import JobHandle, Page, chain, claim_key
    from django_jobs.core.results import JobHandle as ResultsJobHandle
    from django_jobs.flow.idempotency import claim_key as idempotency_claim_key
    from django_jobs.workflows.chains import Page as ChainsPage
    from django_jobs.workflows.chains import chain as chains_chain

    assert (JobHandle, Page, chain, claim_key) == (
        ResultsJobHandle, ChainsPage, chains_chain, idempotency_claim_key,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert all(getattr(django_jobs, name) is not None for name in django_jobs.__all__)


def test_the_package_imports_before_django_is_set_up():
    """INSTALLED_APPS imports ``django_jobs`` before the app registry is ready: no model at import."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    probe = "import django_jobs; print(sorted(django_jobs.__all__))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "chain" in done.stdout


def test_unit_tests_get_no_redis(request):
    assert request.getfixturevalue("redis_db") is None
    assert "_redis_guard" not in request.fixturenames


def test_a_unit_test_asking_for_a_server_is_refused():
    """The unit conftest refuses, at collection, a unit test that asks for a fixture with a server."""
    probe = ROOT / "tests" / "unit" / "test_zz_probe_network.py"
    probe.write_text("def test_wants_redis(redis_url):\n    pass\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "JOBS_TEST_REDIS_URL": "redis://127.0.0.1:9/1"},
        )  # fmt: skip
    finally:
        probe.unlink()
    assert done.returncode != 0
    assert "is a unit test but uses redis_url" in done.stdout + done.stderr


def test_the_architecture_layout_names_every_module():
    """Each top-level module and folder, and each module of the layer folders the Layout spells out
    (ARCHITECTURE.md, which the documentation site includes)."""
    architecture = (ROOT / "ARCHITECTURE.md").read_text()
    layout = architecture[architecture.index("## Layout") :].split("```")[1]
    package = ROOT / "django_jobs"
    folders = [p for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    modules = {p.name for p in package.glob("*.py")} | {f"{p.name}/" for p in folders}
    modules -= {"migrations/"}
    for folder in ("core", "client", "telemetry", "flow", "workflows", "failures", "ops", "admin"):
        modules |= {p.name for p in (package / folder).glob("*.py")} - {"__init__.py"}
    missing = sorted(m for m in modules if m not in layout)
    assert not missing, f"the Layout of ARCHITECTURE.md does not mention {missing}"


def test_no_module_shadows_the_standard_library():
    """A module named like a standard one (``inspect``, ``logging``) is the wrong one for a relative
    reader, a debugger or a tool run from inside its folder."""
    names = {p.stem for p in (ROOT / "django_jobs").rglob("*.py")} | {
        p.name for p in (ROOT / "django_jobs").rglob("*") if p.is_dir()
    }
    shadowing = sorted(names & sys.stdlib_module_names)
    assert not shadowing, f"modules named like the standard library's: {shadowing}"
