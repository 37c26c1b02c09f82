"""Key prefixes, job hash fields and statuses are spelled once, in ``store/lifecycle.py``: a Python
module or a Lua script (``store/lua/``) that spells one by hand drifts from the table the auditor
checks against. A script gets its keys in KEYS and the names of fields and statuses substituted
when it loads (``${F_ATTEMPT}``, ``${QUEUED}``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import django_jobs
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
