"""Key prefixes, job hash fields and statuses are spelled once, in ``store/lifecycle.py``: a Python
module or a Lua script (``store/lua/``) that spells one by hand drifts from the table the auditor
checks against. A script gets its keys in KEYS and the names of fields and statuses substituted
when it loads (``${F_ATTEMPT}``, ``${QUEUED}``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import django_jobs
from django_jobs.store import keys, lifecycle
from django_jobs.store.lifecycle import F

ROOT = Path(django_jobs.__file__).parent
SPELLED = re.compile(r"^(rq:|djjobs:)|^dj_[a-z_]+$|^(queued|started|scheduled|finished|failed|canceled)$")
#: Modules not scanned: the table itself.
SKIPPED = {"store/lifecycle.py"}
#: (module, literal): spellings that are not a key, a job hash field or a job status, each with why.
ALLOWED = {
    # the snapshot of a quarantined item names where it came from: snapshot fields, not Redis keys
    ("failures/deadletter.py", "djjobs:source"),
    ("failures/deadletter.py", "djjobs:member"),
    ("failures/deadletter.py", "djjobs:original "),
    ("failures/deadletter.py", "djjobs:original job_id"),
    ("failures/deadletter.py", "djjobs:original reason"),
    # a batch's own state in the database, and a dead letter's status choices: rows, not job hashes
    ("admin/batches.py", "finished"),
    ("models.py", "failed"),
    # an outcome of retry_now() (RetryOutcome.STARTED), not a job status
    ("failures/retrying.py", "started"),
}


def spellings() -> set[tuple[str, str]]:
    found = set()
    for path in ROOT.rglob("*.py"):
        name = path.relative_to(ROOT).as_posix()
        if name in SKIPPED or name.startswith("migrations/"):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPELLED.search(node.value):
                found.add((name, node.value))
    return found


def test_no_module_spells_a_key_prefix_a_job_field_or_a_status_by_hand() -> None:
    assert spellings() - ALLOWED == set()


def test_every_allowed_spelling_is_still_there() -> None:
    assert spellings() >= ALLOWED  # a stale exception would let the same spelling back in unnoticed


#: A quoted string in Lua, outside comments.
LUA_STRING = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")
#: Every job hash field name (RQ's and ours), which the scripts take from F.
FIELDS = {value for name, value in vars(F).items() if name.isupper()}


def lua_spellings(root: Path = ROOT / "store" / "lua") -> set[tuple[str, str]]:
    found = set()
    for path in root.rglob("*.lua"):
        for line in path.read_text("utf-8").splitlines():
            code = line.split("--", 1)[0]
            for match in LUA_STRING.finditer(code):
                literal = match[1] if match[1] is not None else match[2]
                if SPELLED.search(literal) or literal in FIELDS:
                    found.add((path.relative_to(root).as_posix(), literal))
    return found


def test_no_lua_script_spells_a_key_prefix_a_job_field_or_a_status_by_hand() -> None:
    assert lua_spellings() == set()


def test_the_lua_scan_finds_a_hand_spelled_field_and_status(tmp_path: Path) -> None:
    (tmp_path / "x.lua").write_text(
        "redis.call('HSET', key, 'dj_attempt', 1, 'status', \"queued\") -- 'dj_turn'\n"
    )
    assert lua_spellings(tmp_path) == {("x.lua", "dj_attempt"), ("x.lua", "status"), ("x.lua", "queued")}


#: The module-level names of the standalone keyspace (``keys.LEASES``, ``keys.job_key`` ...): RQ's
#: names, for tests and tools. Code names a namespace's keys through its store's keyspace instead.
STANDALONE_NAMES = {
    name
    for name, value in vars(keys).items()
    if getattr(value, "__self__", None) is keys.STANDALONE
    or (isinstance(value, str) and value and value in vars(keys.STANDALONE).values())
}


def standalone_uses(root: Path = ROOT) -> set[tuple[str, str]]:
    """(module, name) of each use of a standalone name outside the keys module and its re-export, and
    of each namespaced structure's key taken straight from the table (``lc.WAKE.key(...)``)."""
    found = set()
    for path in root.rglob("*.py"):
        name = path.relative_to(root).as_posix()
        if name in {"store/keys.py", "store/__init__.py", "store/lifecycle.py"}:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            found |= {(name, used) for used in _used(node)}
    return found


def _used(node: ast.AST) -> set[str]:
    if isinstance(node, ast.ImportFrom) and node.module in {"django_jobs.store", "django_jobs.store.keys"}:
        return {alias.name for alias in node.names} & STANDALONE_NAMES
    if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name | ast.Attribute):
        return set()
    if isinstance(node.value, ast.Name):
        return {node.attr} & STANDALONE_NAMES if node.value.id == "keys" else set()
    table = node.value  # lc.LEASES.pattern, lc.JOB.prefix, lc.WAKE.key
    structure = lifecycle.STRUCTURES.get(table.attr)
    namespaced = structure is not None and not structure.shared and node.attr in {"prefix", "pattern", "key"}
    on_table = isinstance(table.value, ast.Name) and table.value.id in {"lc", "lifecycle"}
    return {f"{table.attr}.{node.attr}"} if namespaced and on_table else set()


def test_no_module_names_a_namespaced_key_without_its_store() -> None:
    """A key built by the standalone names lands outside a tagged namespace: on a Redis Cluster, in
    another hash slot than the transition's other keys."""
    assert {"LEASES", "JOB_PREFIX", "job_key", "queue_key", "wake_key", "parked_line"} <= STANDALONE_NAMES
    assert standalone_uses() == set()


def test_the_standalone_scan_finds_a_planted_use(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text(
        "from django_jobs.store import LEASES\nkey = keys.job_key('j')\nwake = lc.WAKE.key(queue='q')\n"
        "lock = lc.CRON_LOCK.key(name='n', start='1')\n"  # shared: the same in every namespace
    )
    assert standalone_uses(tmp_path) == {("x.py", "LEASES"), ("x.py", "job_key"), ("x.py", "WAKE.key")}
