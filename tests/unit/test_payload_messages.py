"""PayloadError messages read as English whatever the offending class is called."""

from __future__ import annotations

import re

import pytest
from django.db import models
from django.test.utils import isolate_apps

from django_jobs.core import payload
from django_jobs.exceptions import PayloadError


class _Plain:
    pass


def _message(value: object) -> str:
    with pytest.raises(PayloadError) as info:
        payload.encode([value], {})
    return str(info.value)


@pytest.mark.parametrize(
    ("name", "variable"),
    [("Invoice", "invoice"), ("Order", "order"), ("UserProfile", "user_profile"), ("HTTPLog", "httplog")],
)
@isolate_apps("tests.testapp")
def test_a_model_instance_is_named_without_a_wrong_article(name, variable):
    model = type(name, (models.Model,), {"__module__": "tests.testapp.models"})
    message = _message(model(pk=1))
    assert not re.search(rf"\ban? {name}\b", message), message
    assert f"model instance ({name})" in message
    assert f"({variable}.pk)" in message


@pytest.mark.parametrize("value", [_Plain(), object(), 1j])
def test_any_other_class_is_named_without_an_article(value):
    name = type(value).__name__
    message = _message(value)
    assert not re.search(rf"\ban? {name}\b", message), message
    assert f"is of type {name}, which is not JSON" in message
