"""JSON payloads: IDs and plain values in, the same values out, never pickle.

A handful of everyday types are tagged so they round-trip exactly:
``{"__t": "uuid", "v": "..."}`` and likewise for ``datetime`` (aware only),
``date`` and ``Decimal``. Everything else that JSON cannot carry faithfully
raises :class:`PayloadError` at enqueue, naming the argument.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import re
import uuid
import zlib
import zoneinfo
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.core.files import File
from django.db.models import Model, QuerySet

from django_jobs.conf import jobs_settings
from django_jobs.exceptions import PayloadError, PayloadTooLarge

TAG = "__t"


def _fail(where: str, problem: str) -> PayloadError:
    return PayloadError(f"Job argument {where} {problem}")


def _encode_datetime(value: dt.datetime, where: str) -> dict[str, str]:
    if value.tzinfo is None or value.utcoffset() is None:
        raise _fail(where, "is a naive datetime; pass an aware one (django.utils.timezone.now()).")
    tagged = {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value.tzinfo, zoneinfo.ZoneInfo) and value.tzinfo.key:  # from_file() zones have no key
        tagged["tz"] = value.tzinfo.key
    return tagged


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(where, f"is {value!r}, which JSON cannot carry.")
        return value
    if isinstance(value, list):
        return [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, where)
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, dt.datetime):
        return _encode_datetime(value, where)
    if isinstance(value, dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _fail(where, f"is {value!r}, which JSON cannot carry.")
        return {TAG: "decimal", "v": str(value)}
    raise _fail(where, _advice(value))


def _encode_dict(value: dict[Any, Any], where: str) -> dict[str, Any]:
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(where, f"has the key {key!r}; JSON object keys must be strings.")
        if key == TAG:
            raise _fail(where, f"uses the reserved key {TAG!r}.")
        out[key] = _encode(item, f"{where}[{key!r}]")
    return out


def _advice(value: Any) -> str:
    # The class name comes after a colon or "type", never after an article: "a Invoice" reads wrong.
    kind = type(value).__name__
    if isinstance(value, Model):
        variable = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", kind).lower()
        return f"is a model instance ({kind}); pass its primary key ({variable}.pk) and fetch it in the job."
    if isinstance(value, QuerySet):
        return "is a QuerySet; pass a list of primary keys (list(qs.values_list('pk', flat=True)))."
    if isinstance(value, File | io.IOBase):
        return "is a file; save it and pass its storage name or path."
    if isinstance(value, tuple):
        return "is a tuple, which would come back as a list; pass a list."
    if isinstance(value, bytes | bytearray):
        return "is bytes; pass text (for example base64) or store it and pass a key."
    if isinstance(value, set | frozenset):
        return "is a set; pass a sorted list."
    return f"is of type {kind}, which is not JSON; pass an ID or a plain value."


def encode(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Check and tag the arguments of one call; raise PayloadError naming the first bad one."""
    return (
        [_encode(value, f"#{i}") for i, value in enumerate(args)],
        {name: _encode(value, repr(name)) for name, value in kwargs.items()},
    )


def dumps(job_name: str, args: list[Any], kwargs: dict[str, Any], limit: int) -> bytes:
    """The job's ``data`` field, shaped as RQ's JSONSerializer writes it: [func, instance, args, kwargs]."""
    raw = json.dumps([job_name, None, args, kwargs], separators=(",", ":"), allow_nan=False).encode()
    if len(raw) > limit:
        raise PayloadError(
            f"Job {job_name} payload is {len(raw)} bytes, over JOBS['MAX_PAYLOAD_BYTES'] ({limit}); "
            "pass IDs and fetch the data in the job."
        )
    return raw


def _decode_tagged(tag: str, obj: dict[str, Any]) -> Any:
    value = obj["v"]
    if tag == "uuid":
        return uuid.UUID(value)
    if tag == "date":
        return dt.date.fromisoformat(value)
    if tag == "decimal":
        return Decimal(value)
    if tag == "datetime":
        parsed = dt.datetime.fromisoformat(value)
        return parsed.astimezone(zoneinfo.ZoneInfo(obj["tz"])) if "tz" in obj else parsed
    raise ValueError(f"unknown payload tag {tag!r}")


def _decode_hook(obj: dict[str, Any]) -> Any:
    tag = obj.get(TAG)
    if tag is None:
        return obj
    try:
        return _decode_tagged(tag, obj)
    except Exception as exc:
        # not the decoder's message: it can quote the value, and the value can be a secret
        raise ValueError(f"a {str(tag)[:40]!r} value does not decode ({type(exc).__name__})") from None


def inflate(data: bytes) -> bytes:
    """Decompress RQ's zlib ``data`` without ever holding more than ``JOBS["MAX_PAYLOAD_BYTES"]`` + 1
    bytes: a small compressed field can inflate to gigabytes, in every process that reads it."""
    limit = max(jobs_settings.MAX_PAYLOAD_BYTES, 0)  # max_length=0 would mean "no limit" to zlib
    try:
        inflated = zlib.decompressobj().decompress(data, limit + 1)
    except zlib.error as exc:
        raise PayloadError(f"Job data is neither JSON nor zlib: {exc}") from exc
    if len(inflated) > limit:
        raise PayloadTooLarge(
            f"Job data inflates to more than JOBS['MAX_PAYLOAD_BYTES'] ({limit} bytes); it was not decoded."
        )
    return inflated


def _parse(data: bytes | str, decoder: json.JSONDecoder) -> tuple[str, list[Any], dict[str, Any]]:
    if isinstance(data, bytes) and data[:1] != b"[":
        data = inflate(data)  # RQ compresses the data it writes; we write it plain
    try:
        text = data.decode() if isinstance(data, bytes) else data
        name, _instance, args, kwargs = decoder.decode(text)
    except Exception as exc:
        raise PayloadError(f"Job data is not a django_jobs JSON payload: {exc}") from exc
    if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PayloadError("Job data does not have the shape [name, null, [args], {kwargs}].")
    return name, args, kwargs


#: Built once: ``json.loads`` with a hook builds a decoder per call, which costs more than the decoding.
_DECODER = json.JSONDecoder(object_hook=_decode_hook)
_TAGGED = json.JSONDecoder()


def loads(data: bytes | str) -> tuple[str, list[Any], dict[str, Any]]:
    """Decode a job's ``data`` field; any malformed input raises PayloadError, never anything else."""
    return _parse(data, _DECODER)


def loads_tagged(data: bytes | str) -> tuple[str, list[Any], dict[str, Any]]:
    """The name and the still-tagged arguments, to store or send on exactly as they came."""
    return _parse(data, _TAGGED)
