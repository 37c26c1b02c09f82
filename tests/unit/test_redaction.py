"""Redaction reaches every secret a dead letter shows: nested JSON strings, the ``data`` field of a raw
Redis hash, and what it cannot read (compressed or pickled bytes, RQ's call description) is hidden."""

from __future__ import annotations

import json
import pickle
import zlib

import hypothesis
import pytest
from hypothesis import strategies as st

from django_jobs.failures.redaction import MASK, payload_json, raw_json
from django_jobs.models import DeadLetter

SECRETS = ("hunter2", "sk_live_1", "tok-9")


def snapshot(**fields: bytes | str) -> str:
    """A raw snapshot as ``deadletter.record`` writes it: each field decoded as text, lossily."""
    return json.dumps(
        {k: v.decode(errors="replace") if isinstance(v, bytes) else v for k, v in fields.items()}, indent=1
    )


def data(**kwargs: object) -> str:
    return json.dumps(["shop.charge", None, [1], kwargs])


def assert_hidden(shown: str) -> None:
    assert not [secret for secret in SECRETS if secret in shown], shown


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(snapshot(data=data(password="hunter2", api_key="sk_live_1")), id="json-data"),
        pytest.param(snapshot(data=data(card={"token": "tok-9"}, note="x")), id="nested-key"),
        pytest.param(
            snapshot(data=data(blob=json.dumps({"password": "hunter2"}))), id="json-in-a-json-string"
        ),
        pytest.param(
            snapshot(data=data(blob=json.dumps([json.dumps({"api_key": "sk_live_1"})]))), id="three-levels"
        ),
        pytest.param(snapshot(meta=json.dumps({"auth": {"password": "hunter2"}})), id="another-json-field"),
        pytest.param(snapshot(data=zlib.compress(data(password="hunter2").encode(), 0)), id="zlib-stored"),
        pytest.param(snapshot(data=zlib.compress(data(password="hunter2").encode())), id="zlib"),
        pytest.param(snapshot(data=pickle.dumps({"password": "hunter2"}, protocol=0)), id="pickle-text"),
        pytest.param(snapshot(data=pickle.dumps({"password": "hunter2"})), id="pickle"),
        pytest.param(snapshot(data="password=hunter2"), id="not-json-text"),
        pytest.param(snapshot(description="shop.charge(password='hunter2')"), id="rq-description"),
        pytest.param(snapshot(data=data(password="hunter2"), status="queued")[:-5], id="cut-short"),
    ],
)
def test_a_raw_snapshot_shows_no_secret(raw):
    shown = raw_json(DeadLetter(job_name="shop.charge", raw=raw))
    assert_hidden(shown)
    assert shown  # something is shown: the operator learns why it is hidden


def test_a_raw_snapshot_still_shows_what_is_not_secret():
    raw = snapshot(data=data(password="hunter2", order=42), status="queued", description="shop.charge(1)")
    shown = json.loads(raw_json(DeadLetter(job_name="shop.charge", raw=raw)))
    assert json.loads(shown["data"]) == ["shop.charge", None, [1], {"password": MASK, "order": 42}]
    assert shown["status"] == "queued" and shown["description"] == "shop.charge(…)"


def test_a_payload_argument_that_is_a_json_string_is_redacted_inside():
    entry = DeadLetter(job_name="shop.charge", args=[json.dumps({"api_key": "sk_live_1"})], kwargs={})
    shown = json.loads(payload_json(entry))
    assert json.loads(shown["args"][0]) == {"api_key": MASK}


def mask_cards(data, *, job_name):
    if isinstance(data, dict):
        return {k: "(card)" if k == "card" else mask_cards(v, job_name=job_name) for k, v in data.items()}
    return [mask_cards(v, job_name=job_name) for v in data] if isinstance(data, list) else data


def test_the_redact_setting_applies_inside_nested_json_too(settings):
    settings.JOBS = {**settings.JOBS, "REDACT": "tests.unit.test_redaction.mask_cards"}
    raw = snapshot(data=data(payment=json.dumps({"card": "4242 4242"})))
    shown = raw_json(DeadLetter(job_name="shop.charge", raw=raw))
    assert "4242" not in shown and "(card)" in shown


SECRET = "s3cr3t-value"
_leaves = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.just({"password": SECRET}))
TREES = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=5), children, max_size=3),
        st.builds(json.dumps, children),  # a part of the payload encoded as a JSON string
    ),
    max_leaves=12,
)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(TREES)
def test_no_secret_survives_at_any_depth_of_encoding(tree):
    raw = snapshot(data=json.dumps(["shop.charge", None, [tree], {}]))
    assert SECRET not in raw_json(DeadLetter(job_name="shop.charge", raw=raw))
    assert SECRET not in payload_json(DeadLetter(job_name="shop.charge", args=[tree], kwargs={}))
