"""A script's KEYS and ARGV are declared once: the declaration packs a call by name and generates the
Lua that binds the same names, so the two cannot disagree about a position."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.connection import Encoder

from django_jobs.store import lifecycle, scripts
from django_jobs.store.interface import Group, Interface, Times

EXAMPLE = Interface(
    "example",
    keys=("leases", "lost"),
    args=("token", "stamp"),
    groups=(
        Group("queue", Times.MANY, keys=("list", "wake"), args=("name",)),
        Group("limited", Times.MANY, keys=("key",)),
        Group("scope", Times.MAYBE, keys=("slots",), args=("limits",)),
        Group("home", Times.ONE, keys=("list",)),
    ),
    rest="fields",
)


def _call(scope: dict[str, str] | None) -> tuple[list[Any], list[Any]]:
    return EXAMPLE.pack(
        leases="L",
        lost="X",
        token="t",
        stamp="s",
        queue=[{"list": "q1", "wake": "w1", "name": "one"}, {"list": "q2", "wake": "w2", "name": "two"}],
        limited=["k1"],
        scope=scope,
        home={"list": "h"},
        fields=["f", "v"],
    )


def _run(prologue: str, call_keys: list[Any], call_args: list[Any]) -> dict[str, Any]:
    """The names the generated prologue binds for this call, by running it: its few forms (locals,
    tables, functions of n) read as Python once Lua's table braces and keywords are swapped."""
    python = []
    for line in prologue.splitlines():
        line = re.sub(r"^(\s*)local function (\w+)\(n\)(.*) end$", r"\1def \2(n):\3", line)
        line = re.sub(r"^(\s*)local function (\w+)\(n\)$", r"\1def \2(n):", line)
        line = re.sub(r"^(\s*)local ", r"\1", line).replace("{", "dict(").replace("}", ")")
        python.append("" if line == "end" else line.replace("--", "#", 1) if line.startswith("--") else line)
    names: dict[str, Any] = {"KEYS": [None, *call_keys], "ARGV": [None, *call_args], "tonumber": int}
    exec("\n".join(python), names)  # the text the generator wrote
    return names


@pytest.mark.parametrize("scope", [{"slots": "S", "limits": "{}"}, None])
def test_the_prologue_binds_each_name_to_what_the_call_packed_under_it(scope):
    call_keys, call_args = _call(scope)
    bound = _run(EXAMPLE.prologue(), call_keys, call_args)
    assert [bound[name] for name in ("leases", "lost", "token", "stamp")] == ["L", "X", "t", "s"]
    assert bound["queue_count"] == 2 and bound["limited_count"] == 1
    assert bound["queue"](1) == {"list": "q1", "wake": "w1", "name": "one"}
    assert bound["queue"](2) == {"list": "q2", "wake": "w2", "name": "two"}
    assert bound["limited"](1) == "k1"
    assert bound["home"] == {"list": "h"}
    assert bound["scope"] == (scope if scope else False)
    assert call_args[bound["fields_from"] - 1 :] == ["f", "v"]


def test_a_maybe_group_left_out_packs_nothing_and_counts_zero():
    with_scope, without = _call({"slots": "S", "limits": "{}"}), _call(None)
    assert len(with_scope[0]) == len(without[0]) + 1
    assert without[1][:3] == [2, 1, 0]  # the counts of queue, limited and scope lead ARGV


def test_a_missing_or_unknown_name_fails_with_a_message_naming_it():
    with pytest.raises(TypeError, match=r"^script pause: missing reason; unknown why$"):
        scripts.INTERFACES["pause"].pack(paused="p", field="f", by="b", why="w")


def _sent(call: tuple[list[Any], list[Any]]) -> tuple[list[bytes], list[bytes]]:
    """A call's KEYS and ARGV as the Redis client sends them."""
    encode = Encoder("utf-8", "strict", False).encode
    return [encode(key) for key in call[0]], [encode(arg) for arg in call[1]]


@pytest.mark.parametrize("scope", [{"slots": "S", "limits": "{}"}, None])
def test_a_compiled_packer_packs_what_pack_packs_with_its_fixed_names_worked_out_once(scope):
    queues = [{"list": "q1", "wake": "w1", "name": "one"}, {"list": "q2", "wake": "w2", "name": "two"}]
    pack = EXAMPLE.packer(leases="L", lost="X", queue=queues, limited=["k1"], home={"list": "h"})
    queues[0]["list"] = "changed"  # the fixed names were packed when it was compiled
    packed = pack(token="t", stamp="s", scope=scope, fields=["f", "v"])
    assert _sent(packed) == _sent(_call(scope))
    assert packed[0][:2] == [b"L", b"X"] and packed[1][:2] == [b"2", b"1"]  # encoded once, when compiled


def test_a_fixed_value_is_encoded_as_the_client_would_encode_it_or_left_to_it():
    pack = Interface("t", args=("a", "b", "c", "d", "e")).packer(a="é", b=2, c=0.5, d=b"\xff", e=True)
    assert pack() == ([], ["é", b"2", b"0.5", b"\xff", True])  # a bool: the client still refuses it


def test_a_packer_refuses_an_unknown_name_or_a_bad_item_when_it_is_compiled():
    with pytest.raises(TypeError, match=r"^script example: unknown why$"):
        EXAMPLE.packer(why="w")
    with pytest.raises(TypeError, match=r"an item of queue needs list, wake, name, got \['list'\]"):
        EXAMPLE.packer(queue=[{"list": "q1"}])
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'stamp'"):
        EXAMPLE.packer(leases="L", lost="X", queue=[], limited=[], home="h")(token="t", scope=None, fields=[])


def test_an_item_of_a_group_must_have_exactly_its_names():
    interface = scripts.INTERFACES["run_now"]
    with pytest.raises(TypeError, match=r"script run_now: an item of queue needs list, .*got \['list'\]"):
        interface.pack(hash="h", queues_set="s", id="i", stamp="t", queue={"list": "l"})


def test_every_script_takes_a_queue_in_the_one_layout_of_the_lifecycle():
    for interface in scripts.INTERFACES.values():
        for group in interface.groups:
            if "list" in group.keys and "wake" in group.keys:
                assert group.keys == lifecycle.QueueKeys._fields, interface.name


def test_no_script_body_indexes_keys_or_argv_by_number():
    for name in scripts.INTERFACES:
        body = (scripts.resources.files(scripts.__package__) / "lua" / f"{name}.lua").read_text()
        assert not re.search(r"(KEYS|ARGV)\[", body), name


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        Interface("twice", keys=("a",), args=("a",))


def test_the_gates_are_the_lifecycles_rows_in_order_each_with_its_file_and_stop():
    assert [g.name for g in lifecycle.GATES] == ["expiry", "pause", "line", "concurrency", "rate"]
    text = scripts.gates_text()
    positions = [text.index(f"local function gate_{g.name}(job)") for g in lifecycle.GATES]
    assert positions == sorted(positions)
    assert text.rstrip().endswith(
        "local gates = {" + ", ".join(f"gate_{g.name}" for g in lifecycle.GATES) + "}"
    )
    claim = {t.name: t for t in lifecycle.TRANSITIONS if t.by.startswith("lua/complete_and_claim.lua")}
    reached = set().union(*(t.targets for t in claim.values()))
    for gate in lifecycle.GATES:
        assert gate.stops <= reached, gate.name  # a gate moves a job only where a claim transition goes
        assert all(state in scripts.STOP_OF for state in gate.stops), gate.name
        body = scripts._lua(f"gates/{gate.name}")
        assert {scripts.STOP_OF[s].value for s in gate.stops} <= set(re.findall(r"'(\w+)'", body)) | {
            "deferred"  # the gates that wait return wait_out's stop
        }
