"""System checks: each misconfiguration is reported by ``manage.py check`` under its own id."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import django_rq
import pytest
from django.conf import settings
from django.core.checks import Error, Warning, run_checks
from django.test import override_settings
from rq.serializers import JSONSerializer

from django_jobs import checks, job
from django_jobs.core import registry
from django_jobs.failures.alerts import webhook

ROOT = Path(__file__).resolve().parents[2]
REDIS = settings.RQ_QUEUES["default"]["URL"]
JSON_QUEUE = {"URL": REDIS, "SERIALIZER": "rq.serializers.JSONSerializer"}
ALERT_HOOK = "django_jobs.failures.alerts.log_and_mail_admins"


def ids(messages):
    return [m.id for m in messages]


def ours(messages):
    return [m for m in messages if m.id and m.id.startswith("django_jobs.")]


def with_jobs(**changes):
    """``override_settings`` for JOBS: the test settings plus ``changes``."""
    return override_settings(JOBS={**settings.JOBS, **changes})


def only(messages, check_id):
    found = [m for m in messages if m.id == check_id]
    assert len(found) == 1, ids(messages)
    return found[0]


# --- the test settings ---------------------------------------------------------------------------


def _not_test_local(messages):
    """Leave out W004 for jobs the test modules define: no worker knows those, rightly."""
    return [m for m in ours(messages) if m.id != "django_jobs.W004" or _in_test_app(m.obj)]


def _in_test_app(func):
    return func.__module__.startswith("tests.testapp")


def test_the_test_settings_produce_no_django_jobs_messages():
    assert _not_test_local(run_checks()) == []
    assert _not_test_local(run_checks(include_deployment_checks=True)) == []


def test_our_checks_are_registered_with_django():
    with with_jobs(MODE="async"):
        assert "django_jobs.E007" in ids(run_checks())


# --- INSTALLED_APPS ------------------------------------------------------------------------------


def test_e001_django_rq_missing_from_installed_apps():
    apps = [app for app in settings.INSTALLED_APPS if app != "django_rq"]
    with override_settings(INSTALLED_APPS=apps):
        message = only(checks.check_apps(), "django_jobs.E001")
    assert isinstance(message, Error)
    assert "django_rq" in message.msg and "INSTALLED_APPS" in message.hint


def test_e001_is_not_raised_for_an_app_config_path():
    apps = [
        "django_rq.apps.DjangoRqAdminConfig" if app == "django_rq" else app for app in settings.INSTALLED_APPS
    ]
    with override_settings(INSTALLED_APPS=apps):
        assert checks.check_apps() == []


def test_w002_django_extensions_before_django_jobs(monkeypatch):
    # django_extensions is not installed here: patch INSTALLED_APPS without reloading the app registry.
    monkeypatch.setattr(settings, "INSTALLED_APPS", ["django_extensions", "django_rq", "django_jobs"])
    message = only(checks.check_apps(), "django_jobs.W002")
    assert isinstance(message, Warning)
    assert "runjobs" in message.msg


def test_w002_not_raised_when_django_jobs_comes_first(monkeypatch):
    monkeypatch.setattr(settings, "INSTALLED_APPS", ["django_rq", "django_jobs", "django_extensions"])
    assert checks.check_apps() == []


# --- RQ_QUEUES -----------------------------------------------------------------------------------


@pytest.mark.parametrize("queues", [{}, None, ["default"]])
def test_e002_no_queues(queues):
    with override_settings(RQ_QUEUES=queues):
        message = only(checks.check_settings(), "django_jobs.E002")
    assert "RQ_QUEUES" in message.hint


def test_e003_queue_without_serializer_is_pickle():
    with override_settings(RQ_QUEUES={"default": JSON_QUEUE, "emails": {"URL": REDIS}}):
        message = only(checks.check_settings(), "django_jobs.E003")
        assert django_rq.get_queue("emails").serializer is not JSONSerializer  # what the check guards against
    assert "'emails'" in message.msg and "pickle" in message.msg
    assert 'RQ_QUEUES[\'emails\']["SERIALIZER"] = "rq.serializers.JSONSerializer"' in message.hint


def test_e003_explicit_pickle_serializer():
    with override_settings(
        RQ_QUEUES={
            "default": {**JSON_QUEUE, "SERIALIZER": "rq.serializers.DefaultSerializer"},
            "emails": JSON_QUEUE,
        }
    ):
        message = only(checks.check_settings(), "django_jobs.E003")
    assert "'default'" in message.msg


@pytest.mark.parametrize("serializer", ["rq.serializers.JSONSerializer", JSONSerializer])
def test_json_serializer_as_a_path_or_a_class_is_accepted(serializer):
    with override_settings(
        RQ_QUEUES={"default": {**JSON_QUEUE, "SERIALIZER": serializer}, "emails": JSON_QUEUE}
    ):
        assert ours(checks.check_settings()) == []


def test_rq_json_alias_is_accepted():
    # rq resolves SERIALIZER "json" to JSONSerializer, so it is as pickle-free as the full path.
    with override_settings(RQ_QUEUES={"default": {**JSON_QUEUE, "SERIALIZER": "json"}, "emails": JSON_QUEUE}):
        assert django_rq.get_queue("default").serializer is JSONSerializer
        assert "django_jobs.E003" not in ids(checks.check_settings())


def test_e003_a_global_rq_serializer_does_not_count_because_django_rq_ignores_it():
    with override_settings(
        RQ_QUEUES={"default": {"URL": REDIS}, "emails": JSON_QUEUE},
        RQ={"SERIALIZER": "rq.serializers.JSONSerializer"},
    ):
        # django-rq reads SERIALIZER from RQ_QUEUES[name] only: its views would unpickle this queue's jobs.
        assert django_rq.get_queue("default").serializer is not JSONSerializer
        assert "django_jobs.E003" in ids(checks.check_settings())


@pytest.mark.parametrize(
    "serializer", ["rq.serializers.json_serializer", "django_jobs.serializers.JSON", "no.such.Serializer"]
)
def test_a_serializer_the_check_accepts_is_one_django_rq_can_load_as_json(serializer):
    with override_settings(
        RQ_QUEUES={"default": {**JSON_QUEUE, "SERIALIZER": serializer}, "emails": JSON_QUEUE}
    ):
        if "django_jobs.E003" in ids(checks.check_settings()):
            return  # reported: the user is told to fix it
        loaded = django_rq.get_queue("default").serializer  # not reported: django-rq must be able to use it
        assert loaded.loads(loaded.dumps(["x", None, [1], {}])) == ["x", None, [1], {}]
        assert loaded.dumps([1]).strip() == b"[1]"


def test_e004_job_on_a_queue_missing_from_rq_queues():
    with override_settings(RQ_QUEUES={"emails": JSON_QUEUE}):
        messages = [m for m in checks.check_settings() if m.id == "django_jobs.E004"]
    names = {m.msg.split("'")[1] for m in messages}
    assert {"tests.record", "tests.new_name", "tests.echo_types"} <= names  # the testapp jobs use "default"
    record = next(m for m in messages if "'tests.record'" in m.msg)
    assert "queue 'default'" in record.msg and "emails" in record.hint


def test_e004_for_a_newly_defined_job():
    saved = dict(registry._registry)
    try:

        @job(name="unit.checks.reports", timeout=5, queue="reports")
        def build_report():
            pass

        message = only(checks.check_settings(), "django_jobs.E004")
        assert "'unit.checks.reports'" in message.msg and "'reports'" in message.msg
    finally:
        registry._registry.clear()
        registry._registry.update(saved)
    assert ours(checks.check_settings()) == []


# --- JOBS ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [["MODE"], "queue", 5])
def test_e005_jobs_not_a_dict(value):
    with override_settings(JOBS=value):
        messages = ours(checks.check_settings())
    assert ids(messages) == ["django_jobs.E005"]


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("MAXPAYLOAD_BYTES", "MAX_PAYLOAD_BYTES"),
        ("LEASE_SECOND", "LEASE_SECONDS"),
        ("DEFAULT_RETRIES", "DEFAULT_RETRY"),
    ],
)
def test_e006_unknown_key_with_did_you_mean(typo, meant):
    with with_jobs(**{typo: 1}):
        message = only(checks.check_settings(), "django_jobs.E006")
    assert repr(typo) in message.msg
    assert message.hint == f"Did you mean {meant!r}?"


def test_e006_unknown_key_without_a_close_match_lists_the_known_keys():
    with with_jobs(COLOUR="blue"):
        message = only(checks.check_settings(), "django_jobs.E006")
    assert "MAX_PAYLOAD_BYTES" in message.hint and "LEASE_SECONDS" in message.hint


@pytest.mark.parametrize("mode", ["async", "Queue", "", None])
def test_e007_bad_mode(mode):
    with with_jobs(MODE=mode):
        message = only(checks.check_settings(), "django_jobs.E007")
    assert "queue" in message.hint and "immediate" in message.hint and "capture" in message.hint


@pytest.mark.parametrize("mode", ["queue", "immediate", "capture"])
def test_valid_modes_pass(mode):
    with with_jobs(MODE=mode):
        assert ours(checks.check_settings()) == []


@pytest.mark.parametrize(
    "retry",
    [
        {"max_attempts": 0},
        {"attempts": 3},
        {"base": -1},
        {"factor": math.nan},
        "fast",
        5,
        None,
        ["max_attempts"],
    ],
)
def test_e008_bad_default_retry(retry):
    with with_jobs(DEFAULT_RETRY=retry):
        message = only(checks.check_settings(), "django_jobs.E008")
    assert "max_attempts" in message.hint


def test_a_partial_default_retry_is_valid():
    with with_jobs(DEFAULT_RETRY={"max_attempts": 3}):
        assert ours(checks.check_settings()) == []


NUMERIC = [
    "LEASE_SECONDS",
    "TIMEOUT_GRACE",
    "SHUTDOWN_GRACE",
    "CANCEL_GRACE",
    "IDEMPOTENCY_RETENTION",
    "FINISHED_TTL",
    "REDIS_SOCKET_TIMEOUT",
    "MAINTENANCE_INTERVAL",
    "MAX_PAYLOAD_BYTES",
    "ALERT_WINDOW",
    "REQUEUE_RATE",
    "BATCH_SWEEP_INTERVAL",
]


@pytest.mark.parametrize("key", NUMERIC)
@pytest.mark.parametrize("value", [0, -1, -0.5, "10", True, None])
def test_e009_non_positive_or_non_numeric_setting(key, value):
    with with_jobs(**{key: value}):
        message = only(checks.check_settings(), "django_jobs.E009")
    assert repr(key) in message.msg


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_e009_non_finite_setting(value):
    # Not positive finite numbers: int(nan) / int(inf) raise in conf.py (MAX_PAYLOAD_BYTES is read at every
    # enqueue), and a NaN socket timeout or lease makes no sense, so they must be reported, not crash later.
    unreported = []
    for key in NUMERIC:
        with with_jobs(**{key: value}):
            if "django_jobs.E009" not in ids(checks.check_settings()):
                unreported.append(key)
    assert unreported == []


@pytest.mark.parametrize("key", NUMERIC)
def test_positive_numbers_pass(key):
    # A half-second FINISHED_TTL wants a batch sweep well within it (W031, below).
    sweep = {"BATCH_SWEEP_INTERVAL": 0.1} if key == "FINISHED_TTL" else {}
    with with_jobs(**{key: 0.5 if key != "MAX_PAYLOAD_BYTES" else 1024}, **sweep):
        assert ours(checks.check_settings()) == []


@pytest.mark.parametrize(("interval", "ttl"), [(1801, 3600), (60, 60), (10, 5)])
def test_w031_a_batch_sweep_that_a_finished_job_could_outlive_unseen(interval, ttl):
    with with_jobs(BATCH_SWEEP_INTERVAL=interval, FINISHED_TTL=ttl):
        message = only(checks.check_settings(), "django_jobs.W031")
    assert isinstance(message, Warning)
    assert "BATCH_SWEEP_INTERVAL" in message.msg and "expired" in message.msg and message.hint


def test_w031_not_raised_for_a_sweep_well_within_finished_ttl():
    with with_jobs(BATCH_SWEEP_INTERVAL=1800, FINISHED_TTL=3600):
        assert ours(checks.check_settings()) == []


@pytest.mark.parametrize("log_format", ["xml", "JSON", "", None])
def test_e010_bad_log_format(log_format):
    with with_jobs(LOG_FORMAT=log_format):
        message = only(checks.check_settings(), "django_jobs.E010")
    assert "text" in message.hint and "json" in message.hint


@pytest.mark.parametrize("value", [0, -3, 2.5, "10", True, None, math.inf])
def test_e025_max_snoozes_is_not_a_whole_number_of_at_least_one(value):
    with with_jobs(MAX_SNOOZES=value):
        message = only(checks.check_settings(), "django_jobs.E025")
        assert "django_jobs.E009" not in ids(checks.check_settings())  # reported once, under its own id
    assert "MAX_SNOOZES" in message.msg and "max_snoozes" in message.hint


def test_max_snoozes_is_read_as_given():
    from django_jobs.conf import jobs_settings

    with with_jobs(MAX_SNOOZES=7):
        assert ours(checks.check_settings()) == [] and jobs_settings.MAX_SNOOZES == 7
    assert jobs_settings.MAX_SNOOZES == 100  # the default


def test_several_problems_are_all_reported():
    with with_jobs(MODE="async", LOG_FORMAT="xml", LEASE_SECOND=3, FINISHED_TTL=0):
        found = ids(ours(checks.check_settings()))
    assert sorted(found) == ["django_jobs.E006", "django_jobs.E007", "django_jobs.E009", "django_jobs.E010"]


# --- DATABASES -----------------------------------------------------------------------------------

SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": "unused.sqlite3"}
POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}
databases_override = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@databases_override
@pytest.mark.parametrize("options", [{}, {"OPTIONS": {}}, {"OPTIONS": {"transaction_mode": "DEFERRED"}}])
def test_w001_sqlite_without_immediate_transactions(options):
    with override_settings(DATABASES={"default": POSTGRES, "reports": {**SQLITE, **options}}):
        message = only(checks.check_settings(), "django_jobs.W001")
    assert isinstance(message, Warning)
    assert "'reports'" in message.msg and "database is locked" in message.msg
    assert 'DATABASES[\'reports\']["OPTIONS"]["transaction_mode"] = "IMMEDIATE"' in message.hint


@databases_override
def test_w001_not_raised_for_immediate_sqlite_or_postgresql():
    immediate = {**SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    with override_settings(DATABASES={"default": immediate, "other": POSTGRES}):
        assert ours(checks.check_settings()) == []


# --- manage.py check -----------------------------------------------------------------------------


def _manage_check(**env):
    return subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings", "tests.settings"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_manage_py_check_fails_on_a_django_jobs_error():
    clean = _manage_check()
    assert clean.returncode == 0, clean.stderr
    broken = _manage_check(JOBS_TEST_LEASE="0")  # tests/settings.py reads LEASE_SECONDS from it
    assert broken.returncode != 0
    assert "django_jobs.E009" in broken.stderr
    assert "LEASE_SECONDS" in broken.stderr


def test_cron_settings_name_registered_jobs_and_valid_expressions(settings):
    from django_jobs.checks import check_settings

    settings.JOBS = {"CRON": {"tests.tick": "*/5 * * * *", "tests.hourly": None}}
    assert not [m for m in check_settings() if m.id in ("django_jobs.E011", "django_jobs.E012")]
    settings.JOBS = {"CRON": {"tests.nope": "* * * * *", "tests.tick": "every day"}}
    ids = sorted(m.id for m in check_settings() if m.id.startswith("django_jobs.E01"))
    assert ids == ["django_jobs.E011", "django_jobs.E012"]


# --- callables named in settings -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "check_id", "names"),
    [
        ("REDACT", "django_jobs.redaction.mask_secrets", "django_jobs.E013", "django_jobs.redaction"),
        ("REDACT", "django_jobs.conf.DEFAULTS", "django_jobs.E013", "is not callable"),
        ("ALERT_HOOKS", ["django_jobs.alerts.log_and_mail_admins"], "django_jobs.E035", "['ALERT_HOOKS'][0]"),
        ("ALERT_HOOKS", [ALERT_HOOK, "no.such.hook"], "django_jobs.E035", "['ALERT_HOOKS'][1]"),
    ],
)
def test_a_callable_setting_that_cannot_be_called_is_an_error(setting, value, check_id, names):
    """Found at start-up (a path from before the modules moved, a typo), not when the first job is
    dead-lettered and its alert fails."""
    with with_jobs(**{setting: value}):
        message = only(run_checks(), check_id)
    assert isinstance(message, Error)
    assert names in message.msg


def test_the_documented_callables_pass_the_checks():
    hooks = [ALERT_HOOK, webhook("http://127.0.0.1:9/alerts")]
    with with_jobs(REDACT="django_jobs.failures.redaction.mask_secrets", ALERT_HOOKS=hooks):
        assert not {"django_jobs.E013", "django_jobs.E035"} & set(ids(run_checks()))


@pytest.mark.parametrize("value", [0, -1, 1001, 2.5, "10", True, None])
def test_e036_async_jobs_is_not_a_whole_number_from_1_to_1000(value):
    with with_jobs(ASYNC_JOBS=value):
        message = only(checks.check_settings(), "django_jobs.E036")
        assert "django_jobs.E009" not in ids(checks.check_settings())  # reported once, under its own id
    assert "ASYNC_JOBS" in message.msg


def test_async_jobs_is_read_as_given_and_is_one_by_default():
    from django_jobs.conf import jobs_settings

    with with_jobs(ASYNC_JOBS=20):
        assert ours(checks.check_settings()) == [] and jobs_settings.ASYNC_JOBS == 20
    assert jobs_settings.ASYNC_JOBS == 1
