"""`record` behaves as `dataclass(frozen=True)` does, with and without slots: what the stages rely on when they
build, compare, hash, copy, pickle and replace the values they pass on."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from triage.model import LogEvent, SourceRef
from triage.records import record


def _body() -> dict[str, Any]:
    return {"__annotations__": {"name": "str", "count": "int", "tags": "tuple", "note": "str", "seen": "list"},
            "count": 0, "tags": dataclasses.field(default_factory=tuple),
            "note": dataclasses.field(default="", compare=False, repr=False),
            "seen": dataclasses.field(default_factory=list, hash=False, compare=False),
            "__doc__": "A value.", "__module__": __name__}


# The same class made by `record` and by `dataclass(frozen=True)`, with and without slots; named at module level
# so that pickle finds them.
Made = record(type("Made", (), _body()))
Plain = dataclasses.dataclass(frozen=True)(type("Plain", (), _body()))
MadeSlots = record(slots=True)(type("MadeSlots", (), _body()))
PlainSlots = dataclasses.dataclass(frozen=True, slots=True)(type("PlainSlots", (), _body()))
PAIRS = {False: (Made, Plain), True: (MadeSlots, PlainSlots)}


@pytest.mark.parametrize("slots", [False, True])
def test_a_record_acts_as_a_frozen_dataclass(slots):
    made, plain = PAIRS[slots]
    for cls in (made, plain):
        a, b = cls("a", 2, ("x",), "one"), cls("a", 2, ("x",), "two")
        assert dataclasses.is_dataclass(a) and [f.name for f in dataclasses.fields(a)] == \
            ["name", "count", "tags", "note", "seen"]
        assert a == b and hash(a) == hash(b) and a != cls("a", 3) and a.__eq__(("a", 2)) is NotImplemented
        assert cls("b").tags == () and cls("b").seen == [] and cls("b").seen is not cls("b").seen
        assert cls(name="c", count=4).count == 4
        assert dataclasses.replace(a, count=5) == cls("a", 5, ("x",))
        assert dataclasses.asdict(a) == {"name": "a", "count": 2, "tags": ("x",), "note": "one", "seen": []}
        assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a and copy.copy(a) == a
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.count = 9         # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del a.name          # type: ignore[misc]
        with pytest.raises(TypeError):
            cls()               # the field without a default is required
        assert hasattr(a, "__dict__") is not slots
    shown = "(name='a', count=2, tags=('x',), seen=[])"
    assert repr(made("a", 2, ("x",), "one")) == made.__qualname__ + shown
    assert repr(plain("a", 2, ("x",), "one")) == plain.__qualname__ + shown
    assert made.__match_args__ == plain.__match_args__


def test_the_models_events_compare_hash_and_pickle_by_their_fields():
    ref = SourceRef("vllm.log", 12, "INFO ...", (0, 4))
    event = LogEvent("stats", "v1_stats", {"kv_usage": 0.5}, None, "INFO", "11-29 21:00:01", ref, 3, None)
    again = pickle.loads(pickle.dumps(event))
    assert again == event and again.source == ref and hash(again.source) == hash(ref)
    assert dataclasses.replace(event, seq=4) != event and dataclasses.replace(event, seq=4).seq == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.seq = 5           # type: ignore[misc]


def test_an_undocumented_record_is_documented_by_its_fields():
    @record
    class Point:
        x: int
        y: int = 0

    assert Point.__doc__ == "Point(x, y)" and Point(1) == Point(1, 0)


def test_fields_may_take_the_names_init_uses_for_itself():
    @record
    class Odd:
        self: int
        cls: str = "c"

    assert Odd(self=1).self == 1 and Odd(2, "d") == Odd(2, "d") and Odd(2).cls == "c"
