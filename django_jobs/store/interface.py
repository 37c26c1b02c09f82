"""A Lua script's KEYS and ARGV, named once: the one declaration packs a call by name in Python and
generates the Lua prologue that binds the same names, so no script body indexes KEYS or ARGV by
number and no caller counts positions.

KEYS are the script's fixed keys, then each :class:`Group`'s keys, item by item; ARGV are the counts
of the groups that vary ("maybe" and "many", in their order), the fixed arguments, each group's
arguments item by item, and last the ``rest`` (a variable tail, such as field/value pairs).

The same declaration compiles into a Python packer (:meth:`Interface.packer`): the names a caller
passes the same on every call are packed once, already encoded as Redis receives them, and the packer
of the rest is a generated function of them by keyword, so a hot call (the claim) costs neither a
check, nor a dict, nor the encoding of its fixed names per call.
"""

from __future__ import annotations

import enum
import functools
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: A compiled packer: the KEYS and ARGV of a call, from its names by keyword.
Packer = Callable[..., tuple[list[Any], list[Any]]]


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
        inner = [n for g in self.groups for n in g.names]
        if bad := [n for n in [*names, *inner] if not n.isidentifier() or keyword.iskeyword(n)]:
            raise ValueError(f"script {self.name}: {', '.join(bad)} cannot be named in Python")
        object.__setattr__(self, "_required", frozenset(names))

    @property
    def counted(self) -> tuple[Group, ...]:
        """The groups whose item count leads ARGV."""
        return tuple(g for g in self.groups if g.times is not Times.ONE)

    def pack(self, **given: Any) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of a call whose every name is given: a group's items as mappings of its names
        (a "maybe" group's as one or None, a "many" group's as a sequence; the items of a group of
        one name may be its bare values), the rest as a sequence. Each checked: for calls off the
        hot path (a hot one compiles its :meth:`packer`)."""
        if given.keys() != self._required:
            self._refuse(given)
        return self._unfixed(**self._checked(given))

    def packer(self, **fixed: Any) -> Packer:
        """The packer of the calls whose ``fixed`` names have these values (checked and packed here,
        once): a function of the other names, by keyword (a missing one fails as a call does).

        It takes a group's items as :meth:`pack` does, but a "maybe" or "many" group of one name takes
        only its bare values, as its Lua name is bound to them; and checks none of them."""
        if unknown := sorted(fixed.keys() - self._required):
            raise TypeError(f"script {self.name}: unknown {', '.join(unknown)}")
        return _compile(self, self._checked(fixed))

    @functools.cached_property
    def _unfixed(self) -> Packer:
        return self.packer()

    def _checked(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` with each group's items checked, in the form a compiled packer takes them."""
        checked = dict(given)
        for group in self.groups:
            if group.name in given:
                checked[group.name] = _checked(self.name, group, given[group.name])
        return checked

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


def _checked(script: str, group: Group, value: Any) -> Any:
    if group.times is Times.MANY:
        return [_item(script, group, item) for item in value]
    return None if value is None and group.times is Times.MAYBE else _item(script, group, value)


def _item(script: str, group: Group, item: Any) -> Any:
    """One item of ``group``, checked to have exactly its names; bare if the group binds it bare."""
    bare = len(group.names) == 1 and group.times is not Times.ONE
    if len(group.names) == 1 and not isinstance(item, Mapping):
        return item if bare else {group.names[0]: item}
    if not isinstance(item, Mapping) or item.keys() != set(group.names):
        got = sorted(item) if isinstance(item, Mapping) else type(item).__name__
        raise TypeError(f"script {script}: an item of {group.name} needs {', '.join(group.names)}, got {got}")
    return item[group.names[0]] if bare else item


class _Part(NamedTuple):
    """A run of KEYS or ARGV: a Python expression of a sequence, of the one name it reads."""

    name: str
    code: str


def _parts(interface: Interface) -> tuple[list[_Part], list[_Part]]:
    """The parts of KEYS and of ARGV, in the order of the module's rule."""
    call_keys = [_Part(n, f"({n},)") for n in interface.keys]
    call_args = [_Part(g.name, f"({_count(g)},)") for g in interface.counted]
    call_args += [_Part(n, f"({n},)") for n in interface.args]
    for group in interface.groups:
        call_keys += [_Part(group.name, _flat(group, group.keys))] if group.keys else []
        call_args += [_Part(group.name, _flat(group, group.args))] if group.args else []
    if interface.rest:
        call_args.append(_Part(interface.rest, interface.rest))
    return call_keys, call_args


def _count(group: Group) -> str:
    return f"len({group.name})" if group.times is Times.MANY else f"0 if {group.name} is None else 1"


def _flat(group: Group, names: tuple[str, ...]) -> str:
    """The expression of a group's values of ``names``, item by item."""
    name = group.name
    if len(group.names) == 1 and group.times is not Times.ONE:
        return name if group.times is Times.MANY else f"(() if {name} is None else ({name},))"
    item = "_i" if group.times is Times.MANY else name
    values = "(" + "".join(f"{item}[{n!r}], " for n in names) + ")"
    if group.times is Times.MANY:
        return f"[_x for _i in {name} for _x in {values}]"
    return values if group.times is Times.ONE else f"(() if {name} is None else {values})"


def _compile(interface: Interface, fixed: dict[str, Any]) -> Packer:
    """The generated packer: each run of parts that reads only fixed names, worked out now, is a
    constant; the other parts are expressions of its parameters."""
    constants: dict[str, Any] = {}

    def listed(parts: list[_Part]) -> str:
        out, run = [], []
        for part in [*parts, _Part("", "")]:  # the end flushes the last run
            if part.name in fixed:
                run += eval(part.code, dict(fixed))  # the parts of fixed names, now
                continue
            if run:
                name = f"_c{len(constants)}"
                constants[name], run = tuple(_wire(value) for value in run), []
                out.append(f"*{name}")
            if part.code:
                out.append(f"*{part.code}")
        return "[" + ", ".join(out) + "]"

    call_keys, call_args = _parts(interface)
    body = f"    return {listed(call_keys)}, {listed(call_args)}\n"
    free = [n for n in sorted(interface._required) if n not in fixed]
    source = f"def pack_{interface.name}({'*, ' + ', '.join(free) if free else ''}):\n{body}"
    exec(source, constants)  # generated from the declaration, as the Lua prologue is
    packer: Packer = constants[f"pack_{interface.name}"]
    return packer


def _wire(value: Any) -> Any:
    """A fixed value as the Redis client sends it, encoded once instead of on every call: an ASCII
    string as its bytes (the same in any client encoding), a number as the client spells it (its
    ``repr``); anything else as it is, for the client to encode or refuse."""
    if isinstance(value, str) and value.isascii():
        return value.encode()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value).encode()
    return value


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
