"""A Lua script's KEYS and ARGV, named once: the one declaration packs a call by name in Python and
generates the Lua prologue that binds the same names, so no script body indexes KEYS or ARGV by
number and no caller counts positions.

KEYS are the script's fixed keys, then each :class:`Group`'s keys, item by item; ARGV are the counts
of the groups that vary ("maybe" and "many", in their order), the fixed arguments, each group's
arguments item by item, and last the ``rest`` (a variable tail, such as field/value pairs).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Times(enum.Enum):
    """How many items of a group a call passes, and what its Lua name is bound to."""

    ONE = "one"  # always one: a table of its names
    MAYBE = "maybe"  # none or one: the table (its value if it has one name), or false
    MANY = "many"  # any number: a function n -> the n-th item's table (its value if it has one name)


@dataclass(frozen=True)
class Group:
    """A repeated part of a call: ``keys`` (in KEYS) and ``args`` (in ARGV) for each item."""

    name: str
    times: Times
    keys: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.keys + self.args


@dataclass(frozen=True)
class Interface:
    """The named KEYS and ARGV of the script ``lua/<name>.lua``."""

    name: str
    keys: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    groups: tuple[Group, ...] = ()
    rest: str = ""  # the name of the ARGV tail, if the script takes one
    _required: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [*self.keys, *self.args, *(g.name for g in self.groups), *([self.rest] if self.rest else [])]
        if len(set(names)) != len(names):
            raise ValueError(f"script {self.name}: a name is declared twice in {names}")
        object.__setattr__(self, "_required", frozenset(names))

    @property
    def counted(self) -> tuple[Group, ...]:
        """The groups whose item count leads ARGV."""
        return tuple(g for g in self.groups if g.times is not Times.ONE)

    def pack(self, **given: Any) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of a call whose every name is given: a group's items as mappings of its names
        (a "maybe" group's as one or None, a "many" group's as a sequence; the items of a group of
        one name may be its bare values), the rest as a sequence."""
        if given.keys() != self._required:
            self._refuse(given)
        call_keys = [given[name] for name in self.keys]
        counts = [_count(g, given[g.name]) for g in self.counted]
        call_args = [*counts, *(given[name] for name in self.args)]
        for group in self.groups:
            for item in _items(group, given[group.name]):
                call_keys += _values(self.name, group, group.keys, item)
                call_args += _values(self.name, group, group.args, item)
        if self.rest:
            call_args += given[self.rest]
        return call_keys, call_args

    def _refuse(self, given: Mapping[str, Any]) -> None:
        missing, unknown = sorted(self._required - given.keys()), sorted(given.keys() - self._required)
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise TypeError(f"script {self.name}: {'; '.join(parts)}")

    def prologue(self) -> str:
        """The Lua that binds this interface's names: a local per fixed key and argument, per group a
        table, ``false``, or a function of the item number (and ``<group>_count``), ``<rest>_from``
        the index in ARGV of the rest's first item."""
        lines = [f"-- The names of this script's KEYS and ARGV, generated from its interface ({self.name})."]
        counted = self.counted
        lines += [f"local {g.name}_count = tonumber(ARGV[{i}])" for i, g in enumerate(counted, 1)]
        lines += _locals(self.keys, "KEYS", 0)
        lines += _locals(self.args, "ARGV", len(counted))
        key_at, arg_at = str(len(self.keys)), str(len(counted) + len(self.args))
        for group in self.groups:
            lines.append(_bind(group, key_at, arg_at))
            key_at, arg_at = _past(group, key_at, len(group.keys)), _past(group, arg_at, len(group.args))
        if self.rest:
            lines.append(f"local {self.rest}_from = {arg_at} + 1")
        return "\n".join(lines) + "\n"


def _count(group: Group, value: Any) -> int:
    return (0 if value is None else 1) if group.times is Times.MAYBE else len(value)


def _items(group: Group, value: Any) -> Sequence[Any]:
    if group.times is Times.MANY:
        return value  # type: ignore[no-any-return]
    return () if value is None else (value,)


def _values(script: str, group: Group, names: tuple[str, ...], item: Any) -> list[Any]:
    if len(group.names) == 1 and not isinstance(item, Mapping):
        return [item] if names else []
    if not isinstance(item, Mapping) or item.keys() != set(group.names):
        got = sorted(item) if isinstance(item, Mapping) else type(item).__name__
        raise TypeError(f"script {script}: an item of {group.name} needs {', '.join(group.names)}, got {got}")
    return [item[name] for name in names]


def _locals(names: tuple[str, ...], array: str, before: int) -> list[str]:
    if not names:
        return []
    values = ", ".join(f"{array}[{before + i}]" for i in range(1, len(names) + 1))
    return [f"local {', '.join(names)} = {values}"]


def _past(group: Group, at: str, width: int) -> str:
    """Where the next group starts, in KEYS or ARGV, after this one."""
    if not width:
        return at
    if group.times is Times.ONE:
        return f"{at} + {width}"
    return f"{at} + {group.name}_count * {width}"


def _table(group: Group, key_at: str, arg_at: str) -> str:
    parts = [f"{n} = KEYS[{key_at} + {i}]" for i, n in enumerate(group.keys, 1)]
    parts += [f"{n} = ARGV[{arg_at} + {i}]" for i, n in enumerate(group.args, 1)]
    return "{" + ", ".join(parts) + "}"


def _bind(group: Group, key_at: str, arg_at: str) -> str:
    if group.times is Times.ONE:
        return f"local {group.name} = {_table(group, key_at, arg_at)}"
    kw, aw = len(group.keys), len(group.args)
    array, at = ("KEYS", key_at) if kw else ("ARGV", arg_at)
    if group.times is Times.MAYBE:
        value = f"{array}[{at} + 1]" if len(group.names) == 1 else _table(group, key_at, arg_at)
        return f"local {group.name} = {group.name}_count > 0 and {value}"
    if len(group.names) == 1:
        return f"local function {group.name}(n) return {array}[{at} + n] end"
    return (
        f"local function {group.name}(n)\n"
        f"  local k, a = {key_at} + (n - 1) * {kw}, {arg_at} + (n - 1) * {aw}\n"
        f"  return {_table(group, 'k', 'a')}\n"
        "end"
    )
