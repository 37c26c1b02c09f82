"""JSON payloads: what goes in comes out exactly, and everything else is refused with a clear PayloadError."""

from __future__ import annotations

import datetime as dt
import importlib.resources
import io
import json
import math
import pickle
import uuid
import zlib
import zoneinfo
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.files import File
from rq.serializers import JSONSerializer

from django_jobs.core import payload
from django_jobs.exceptions import JobsError, PayloadError
from tests.testapp.models import Item

BIG = 10**9
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def roundtrip(*args, **kwargs):
    """The arguments as the worker will see them: encode, serialise, decode."""
    encoded_args, encoded_kwargs = payload.encode(args, kwargs)
    name, out_args, out_kwargs = payload.loads(payload.dumps("unit.job", encoded_args, encoded_kwargs, BIG))
    assert name == "unit.job"
    return out_args, out_kwargs


def encode_one(value):
    return payload.encode([value], {})


# --- round trips ---------------------------------------------------------------------------------


def test_uuid_round_trips_as_a_uuid():
    value = uuid.uuid4()
    (out,), _ = roundtrip(value)
    assert type(out) is uuid.UUID
    assert out == value


def test_aware_utc_datetime_round_trips_exactly():
    value = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=dt.UTC)
    (out,), _ = roundtrip(value)
    assert type(out) is dt.datetime
    assert out == value
    assert out.microsecond == 123456
    assert out.utcoffset() == dt.timedelta(0)


def test_zoneinfo_datetime_keeps_its_zone_key_and_wall_clock():
    value = dt.datetime(2026, 7, 14, 9, 45, 30, 5, tzinfo=PARIS)
    (out,), _ = roundtrip(value)
    assert out == value
    assert isinstance(out.tzinfo, zoneinfo.ZoneInfo)
    assert out.tzinfo.key == "Europe/Paris"
    assert out.replace(tzinfo=None) == dt.datetime(2026, 7, 14, 9, 45, 30, 5)  # same wall clock
    assert out.utcoffset() == dt.timedelta(hours=2)


@pytest.mark.parametrize("fold", [0, 1])
def test_ambiguous_dst_wall_time_keeps_its_fold(fold):
    # 02:30 happens twice in Paris on 2026-10-25; equality with the same tzinfo ignores fold, so check it.
    value = dt.datetime(2026, 10, 25, 2, 30, fold=fold, tzinfo=PARIS)
    (out,), _ = roundtrip(value)
    assert out.tzinfo.key == "Europe/Paris"
    assert out.fold == fold
    assert out.utcoffset() == value.utcoffset()
    assert out.astimezone(dt.UTC) == value.astimezone(dt.UTC)


def _paris_tzif() -> bytes:
    for root in zoneinfo.TZPATH:
        path = Path(root, "Europe", "Paris")
        if path.is_file():
            return path.read_bytes()
    return importlib.resources.files("tzdata.zoneinfo.Europe").joinpath("Paris").read_bytes()


def test_datetime_in_a_zone_loaded_from_a_file_round_trips():
    # ZoneInfo.from_file() zones have key None: whatever is encoded must decode, or be refused at enqueue.
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(_paris_tzif()))
    value = dt.datetime(2026, 7, 14, 9, 45, tzinfo=zone)
    (out,), _ = roundtrip(value)
    assert out == value
    assert out.utcoffset() == dt.timedelta(hours=2)


def test_fixed_offset_datetime_keeps_its_offset():
    value = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    (out,), _ = roundtrip(value)
    assert out == value
    assert out.utcoffset() == dt.timedelta(hours=5, minutes=30)


def test_date_round_trips_as_a_date_not_a_datetime():
    (out,), _ = roundtrip(dt.date(2026, 1, 2))
    assert type(out) is dt.date
    assert out == dt.date(2026, 1, 2)


@pytest.mark.parametrize("text", ["1.10", "0.00", "-0", "1E+3", "123456789012345678901234567890.000000001"])
def test_decimal_round_trips_with_its_exact_digits(text):
    (out,), _ = roundtrip(Decimal(text))
    assert type(out) is Decimal
    assert str(out) == text  # "1.10", not 1.1 and not "1.1"


def test_plain_values_round_trip_with_their_types():
    values = [None, True, False, 0, -7, 2**70, "", "héllo ✓ \u2028", 1.5, 0.1, -2.5e-300]
    out, _ = roundtrip(*values)
    assert out == values
    assert [type(v) for v in out] == [type(v) for v in values]  # True stays a bool, 0 stays an int


def test_nested_lists_and_dicts_round_trip_with_tagged_values_inside():
    value = {
        "ids": [uuid.UUID(int=1), uuid.UUID(int=2)],
        "order": {
            "total": Decimal("19.90"),
            "placed": dt.datetime(2026, 5, 1, 12, tzinfo=PARIS),
            "ships": dt.date(2026, 5, 3),
            "lines": [[1, "a"], [2, {"v": None}]],
        },
        "v": "a key named v is fine",
        "t": {},
    }
    out, out_kwargs = roundtrip([value, [[], [[]]]], order=value)
    assert out == [[value, [[], [[]]]]]
    assert out_kwargs == {"order": value}
    assert str(out_kwargs["order"]["order"]["total"]) == "19.90"
    assert out_kwargs["order"]["order"]["placed"].tzinfo.key == "Europe/Paris"


def test_kwargs_round_trip():
    _, out = roundtrip(when=dt.date(2026, 2, 3), user_id=uuid.UUID(int=9), amount=Decimal("0.10"))
    assert out == {"when": dt.date(2026, 2, 3), "user_id": uuid.UUID(int=9), "amount": Decimal("0.10")}


# --- refused arguments ---------------------------------------------------------------------------


def test_payload_error_is_a_jobs_error_and_a_type_error():
    with pytest.raises(PayloadError) as info:
        encode_one({1, 2})
    assert isinstance(info.value, JobsError)
    assert isinstance(info.value, TypeError)


def test_model_instance_is_refused_and_pk_is_suggested():
    with pytest.raises(PayloadError) as info:
        payload.encode(["ok", Item(pk=3, name="x")], {})
    message = str(info.value)
    assert "#1" in message
    assert "model instance (Item)" in message
    assert "item.pk" in message


def test_model_instance_in_kwargs_is_named():
    with pytest.raises(PayloadError, match=r"argument 'item' is a model instance \(Item\).*item\.pk"):
        payload.encode([], {"item": Item(pk=3, name="x")})


def test_queryset_is_refused():
    with pytest.raises(PayloadError, match=r"argument 'items' is a QuerySet.*values_list"):
        payload.encode([], {"items": Item.objects.all()})


@pytest.mark.parametrize(
    "make", [lambda: File(io.BytesIO(b"x"), name="a.txt"), lambda: io.BytesIO(b"x"), lambda: io.StringIO("x")]
)
def test_file_is_refused(make):
    with pytest.raises(PayloadError, match=r"argument #0 is a file"):
        encode_one(make())


def test_open_file_is_refused(tmp_path):
    path = tmp_path / "upload.csv"
    path.write_text("a,b\n")
    with path.open("rb") as handle, pytest.raises(PayloadError, match=r"argument 'upload' is a file"):
        payload.encode([], {"upload": handle})


def test_tuple_is_refused_wherever_it_is_nested():
    with pytest.raises(PayloadError, match=r"argument #0 is a tuple.*pass a list"):
        encode_one((1, 2))
    with pytest.raises(PayloadError, match=r"argument #1\[2\] is a tuple"):
        payload.encode(["a", [1, 2, (3, 4)]], {})
    with pytest.raises(PayloadError, match=r"argument 'data'\['pair'\] is a tuple"):
        payload.encode([], {"data": {"pair": ("a", "b")}})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_float_is_refused(value):
    with pytest.raises(PayloadError, match=r"argument #0 is (nan|inf|-inf)"):
        encode_one(value)
    with pytest.raises(PayloadError, match=r"argument 'ratio'\['x'\]"):
        payload.encode([], {"ratio": {"x": value}})


@pytest.mark.parametrize("text", ["NaN", "sNaN", "Infinity", "-Infinity"])
def test_non_finite_decimal_is_refused(text):
    with pytest.raises(PayloadError, match=r"argument 'amount' is Decimal"):
        payload.encode([], {"amount": Decimal(text)})


@pytest.mark.parametrize("key", [1, None, 2.5, ("a", "b"), uuid.UUID(int=1)])
def test_non_string_dict_key_is_refused(key):
    with pytest.raises(PayloadError, match=r"argument #0 has the key .*must be strings"):
        encode_one({key: "v"})


def test_reserved_tag_key_is_refused_so_user_dicts_are_never_decoded_as_tagged_values():
    forged = {"__t": "uuid", "v": "00000000-0000-0000-0000-000000000001"}
    with pytest.raises(PayloadError, match=r"argument 'data'\['inner'\] uses the reserved key '__t'"):
        payload.encode([], {"data": {"inner": forged}})


def test_naive_datetime_is_refused():
    with pytest.raises(PayloadError, match=r"argument 'when' is a naive datetime"):
        payload.encode([], {"when": dt.datetime(2026, 1, 1, 12)})


@pytest.mark.parametrize("value", [b"raw", bytearray(b"raw")])
def test_bytes_are_refused(value):
    with pytest.raises(PayloadError, match=r"argument #0 is bytes"):
        encode_one(value)


@pytest.mark.parametrize("value", [{1, 2}, frozenset({"a"})])
def test_sets_are_refused(value):
    with pytest.raises(PayloadError, match=r"argument #0 is a set.*sorted list"):
        encode_one(value)


def test_other_objects_are_refused_by_type_name():
    class Money:
        pass

    with pytest.raises(PayloadError, match=r"argument #0 is of type Money, which is not JSON"):
        encode_one(Money())
    with pytest.raises(PayloadError, match=r"argument #0 is of type timedelta"):
        encode_one(dt.timedelta(seconds=1))


def test_dumps_enforces_the_limit_at_the_exact_byte_count():
    args, kwargs = payload.encode(["x" * 100], {})
    size = len(payload.dumps("unit.job", args, kwargs, BIG))
    assert payload.dumps("unit.job", args, kwargs, size)  # exactly at the limit is fine
    with pytest.raises(
        PayloadError, match=rf"unit\.job payload is {size} bytes.*MAX_PAYLOAD_BYTES.*\({size - 1}\)"
    ):
        payload.dumps("unit.job", args, kwargs, size - 1)


# --- decoding untrusted data ---------------------------------------------------------------------

GARBAGE = [
    pytest.param(pickle.dumps(("tests.record", None, ["a"], {})), id="pickle-tuple"),
    pytest.param(pickle.dumps({"data": 1}, protocol=0), id="pickle-protocol-0"),
    pytest.param(b"\x80\x04\x95", id="pickle-prefix"),
    pytest.param(b"\xff\xfe\x00garbage", id="binary"),
    pytest.param(zlib.compress(b"not json"), id="zlib-not-json"),
    pytest.param(zlib.compress(pickle.dumps(["n", None, [], {}])), id="zlib-pickle"),
    pytest.param("not json", id="text"),
    pytest.param("", id="empty-str"),
    pytest.param(b"", id="empty-bytes"),
    pytest.param("null", id="null"),
    pytest.param("5", id="number"),
    pytest.param("[]", id="empty-list"),
    pytest.param('["n", null, []]', id="three-items"),
    pytest.param('["n", null, [], {}, 1]', id="five-items"),
    pytest.param("[1, null, [], {}]", id="name-not-str"),
    pytest.param('["n", null, {}, {}]', id="args-not-list"),
    pytest.param('["n", null, [], []]', id="kwargs-not-dict"),
    pytest.param('{"a": 1, "b": 2, "c": 3, "d": 4}', id="dict-of-four"),
    pytest.param('"abcd"', id="string-of-four"),
    pytest.param('["n", null, [{"__t": "pickle", "v": "x"}], {}]', id="unknown-tag"),
    pytest.param('["n", null, [{"__t": 5, "v": "x"}], {}]', id="non-string-tag"),
    pytest.param('["n", null, [{"__t": "uuid"}], {}]', id="tag-without-value"),
    pytest.param('["n", null, [{"__t": "uuid", "v": "zzz"}], {}]', id="bad-uuid"),
    pytest.param('["n", null, [{"__t": "uuid", "v": 5}], {}]', id="uuid-not-str"),
    pytest.param('["n", null, [{"__t": "decimal", "v": "one"}], {}]', id="bad-decimal"),
    pytest.param('["n", null, [{"__t": "decimal", "v": []}], {}]', id="decimal-list"),
    pytest.param('["n", null, [{"__t": "date", "v": "2026-13-01"}], {}]', id="bad-date"),
    pytest.param('["n", null, [{"__t": "datetime", "v": "yesterday"}], {}]', id="bad-datetime"),
    pytest.param(
        '["n", null, [{"__t": "datetime", "v": "2026-01-01T00:00:00+00:00", "tz": "No/Where"}], {}]',
        id="unknown-zone",
    ),
    pytest.param(
        '["n", null, [{"__t": "datetime", "v": "2026-01-01T00:00:00+00:00", "tz": "../../etc/passwd"}], {}]',
        id="zone-path",
    ),
    pytest.param(
        '["n", null, [{"__t": "datetime", "v": "2026-01-01T00:00:00+00:00", "tz": 5}], {}]', id="zone-int"
    ),
    pytest.param("[" * 100_000 + "]" * 100_000, id="deep-nesting"),
    pytest.param(None, id="None"),
    pytest.param(12345, id="int"),
]


@pytest.mark.parametrize("data", GARBAGE)
def test_loads_of_garbage_raises_payload_error_and_nothing_else(data):
    with pytest.raises(PayloadError):
        payload.loads(data)


@pytest.mark.parametrize("data", [p for p in GARBAGE if "__t" not in str(p.values[0])])
def test_loads_tagged_of_garbage_raises_payload_error_and_nothing_else(data):
    with pytest.raises(PayloadError):
        payload.loads_tagged(data)


def test_loads_tagged_keeps_the_tags_for_storing_and_sending_on():
    args, kwargs = payload.encode([uuid.UUID(int=5)], {"amount": Decimal("1.10")})
    data = payload.dumps("unit.job", args, kwargs, BIG)
    assert payload.loads_tagged(data) == ("unit.job", args, kwargs)
    assert payload.loads_tagged(data.decode()) == ("unit.job", args, kwargs)


# --- RQ compatibility ----------------------------------------------------------------------------


def test_rq_json_serializer_reads_the_encoded_form():
    value = dt.datetime(2026, 1, 2, 3, 4, tzinfo=PARIS)
    args, kwargs = payload.encode([uuid.UUID(int=1), [1, "a"]], {"at": value, "amount": Decimal("1.10")})
    data = payload.dumps("tests.record", args, kwargs, BIG)
    assert isinstance(data, bytes)
    assert JSONSerializer.loads(data) == ["tests.record", None, args, kwargs]
    # The tagged values are plain JSON that RQ tools can show.
    assert JSONSerializer.loads(data)[3]["amount"] == {"__t": "decimal", "v": "1.10"}
    assert json.loads(data)[2][0] == {"__t": "uuid", "v": "00000000-0000-0000-0000-000000000001"}


# --- at enqueue ----------------------------------------------------------------------------------
