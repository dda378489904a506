"""shmguard.record: the one record type, declared like a dataclass, importing nothing."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

from shmguard.record import Record, field, fields
from tests.support.paths import CHECKOUT


class Point(Record):
    x: int
    y: int
    label: str = "origin"


class Bag(Record):
    name: str
    items: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    tags: tuple[str, ...] = field(default=())


class Counter(Record, frozen=False):
    """Filled in as it goes."""

    count: int = 0
    seen: list[int] = field(default_factory=list)


class Nested(Record):
    point: Point
    points: tuple[Point, ...] = ()
    by_name: dict = field(default_factory=dict)


class WithClassVar(Record):
    LIMIT: ClassVar[int] = 3
    value: int = 0


class Point3(Point):
    z: int = 0


class Derived(Record):
    """A record with its own property and method, as shmguard's records have."""

    total: int
    free: int

    @property
    def used(self) -> int:
        return self.total - self.free

    def half(self) -> Derived:
        return self.replace(total=self.total // 2)


def test_fields_in_declaration_order():
    assert fields(Point) == ("x", "y", "label")
    assert fields(Point(1, 2)) == ("x", "y", "label")
    assert Point.__slots__ == ("x", "y", "label")
    assert Point.__match_args__ == ("x", "y", "label")


def test_defaults_fill_what_is_not_given():
    assert Point(1, 2).label == "origin"
    assert Bag("b").tags == ()


def test_factories_make_one_value_per_record():
    a, b = Bag("a"), Bag("b")
    a.items.append("x")
    a.extra["k"] = 1
    assert b.items == [] and b.extra == {}
    assert a.items is not b.items


def test_a_mutable_default_without_factory_is_refused():
    with pytest.raises(TypeError, match="default_factory"):
        class Shared(Record):
            items: list = []  # noqa: RUF012 (the point of the test)


def test_field_needs_exactly_one_of_default_and_factory():
    with pytest.raises(TypeError):
        field()
    with pytest.raises(TypeError):
        field(default=1, default_factory=int)


def test_positional_keyword_and_mixed_construction():
    assert Point(1, 2, "a") == Point(x=1, y=2, label="a") == Point(1, y=2, label="a")


def test_missing_field_is_named():
    with pytest.raises(TypeError, match="'y'"):
        Point(1)


def test_unknown_field_is_named():
    with pytest.raises(TypeError, match="no field 'z'"):
        Point(1, 2, z=3)


def test_too_many_positional_arguments():
    with pytest.raises(TypeError, match="3 fields, 4 were given"):
        Point(1, 2, "a", "b")


def test_a_field_given_twice():
    with pytest.raises(TypeError, match="'x' twice"):
        Point(1, 2, x=3)


def test_a_field_without_default_cannot_follow_one_with():
    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):
        class Bad(Record):
            a: int = 1
            b: int


def test_slots_are_declared_as_annotations_only():
    with pytest.raises(TypeError, match="annotations"):
        class Bad(Record):
            __slots__ = ("a",)


def test_frozen_by_default():
    p = Point(1, 2)
    with pytest.raises(AttributeError, match="immutable"):
        p.x = 5
    with pytest.raises(AttributeError):
        del p.x
    with pytest.raises(AttributeError):
        p.other = 1  # not a field: no __dict__ either
    assert p.x == 1


def test_mutable_variant_takes_assignment_but_no_new_attribute():
    c = Counter()
    c.count += 1
    c.seen.append(1)
    assert c == Counter(1, [1])
    with pytest.raises(AttributeError):
        c.other = 1


def test_replace_makes_a_changed_copy():
    p = Point(1, 2)
    q = p.replace(y=5)
    assert (p.y, q.y, q.x, q.label) == (2, 5, 1, "origin")
    assert type(q) is Point
    with pytest.raises(TypeError, match="no field 'z'"):
        p.replace(z=1)


def test_replace_keeps_a_factory_made_value():
    a = Bag("a", ["x"])
    assert a.replace(name="b").items is a.items  # as dataclasses.replace: a shallow copy


def test_as_dict_nests_records_and_lists_tuples():
    n = Nested(Point(1, 2), (Point(3, 4, "b"),), {"k": Point(5, 6)})
    assert n.as_dict() == {
        "point": {"x": 1, "y": 2, "label": "origin"},
        "points": [{"x": 3, "y": 4, "label": "b"}],
        "by_name": {"k": {"x": 5, "y": 6, "label": "origin"}},
    }
    json.dumps(n.as_dict())
    assert n.as_dict(shallow=True)["point"] is n.point


def test_equality_by_type_and_fields():
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != Point3(1, 2)  # a subclass is another kind of record
    assert Point(1, 2) != (1, 2, "origin")


def test_frozen_records_hash_by_value_even_with_lists_inside():
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1, 2), Point(1, 2), Point(2, 1)}) == 2
    assert hash(Bag("a", ["x"], {"k": [1]})) == hash(Bag("a", ["x"], {"k": [1]}))


def test_mutable_records_are_unhashable():
    with pytest.raises(TypeError):
        hash(Counter())


def test_repr_names_each_field():
    assert repr(Point(1, 2)) == "Point(x=1, y=2, label='origin')"
    assert repr(Counter()) == "Counter(count=0, seen=[])"


def test_classvar_is_not_a_field():
    assert fields(WithClassVar) == ("value",)
    assert WithClassVar.LIMIT == 3


def test_inheritance_appends_fields_after_the_parent():
    p = Point3(1, 2, "a", 3)
    assert fields(Point3) == ("x", "y", "label", "z")
    assert Point3.__slots__ == ("z",)  # the parent's slots are not repeated
    assert (p.x, p.z) == (1, 3)
    assert isinstance(p, Point)
    with pytest.raises(AttributeError):
        p.z = 1


def test_a_child_may_change_a_parent_default():
    class Labeled(Point):
        label: str = "here"

    assert fields(Labeled) == ("x", "y", "label")
    assert Labeled(1, 2).label == "here"


def test_frozen_and_mutable_do_not_mix_in_inheritance():
    with pytest.raises(TypeError, match="mutable record cannot extend a frozen"):
        class Loose(Point, frozen=False):
            pass
    with pytest.raises(TypeError, match="frozen record cannot extend a mutable"):
        class Tight(Counter, frozen=True):
            pass

    class MoreCounting(Counter):  # inherits mutability
        extra: int = 0

    m = MoreCounting()
    m.extra = 1
    assert m.extra == 1


def test_a_mutable_record_under_a_fieldless_frozen_base():
    class Base(Record):
        def describe(self) -> str:
            return repr(self)

    class Filled(Base, frozen=False):
        n: int = 0

    f = Filled()
    f.n = 2
    assert f.describe() == "Filled(n=2)"
    with pytest.raises(AttributeError):
        Base().x = 1


def test_own_methods_and_properties_and_init():
    d = Derived(10, 4)
    assert d.used == 6 and d.half() == Derived(5, 4)

    class Rooted(Record):
        path: str

        def __init__(self, path: str | None = None) -> None:
            super().__init__(path or "/")

    assert Rooted().path == "/" and Rooted("/x").path == "/x"


def test_copy_and_pickle_keep_the_record():
    p = Point3(1, 2, "a", 3)
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    c = Counter(2, [1])
    clone = copy.deepcopy(c)
    assert clone == c and clone.seen is not c.seen


def test_match_by_position():
    match Point(1, 2):
        case Point(x, y):
            assert (x, y) == (1, 2)
        case _:
            pytest.fail("no match")


def test_records_without_future_annotations(tmp_path):
    """A module without `from __future__ import annotations` (evaluated annotations) declares records too."""
    namespace: dict = {}
    exec("from typing import ClassVar\n"
         "from shmguard.record import Record\n"
         "class Plain(Record):\n"
         "    LIMIT: ClassVar[int] = 3\n"
         "    a: int\n"
         "    b: 'int | None' = None\n"
         "    c: tuple = ()\n", namespace)
    assert fields(namespace["Plain"]) == ("a", "b", "c")
    assert namespace["Plain"].LIMIT == 3


ROOT = CHECKOUT
STDLIB_HEAVY = ("typing", "dataclasses", "inspect", "enum", "re", "typing_extensions")


def _new_modules(code: str) -> list[str]:
    program = ("import sys\nbefore = set(sys.modules)\n" + code + "\n"
               "print(' '.join(sorted(m for m in set(sys.modules) - before if m in %r)))" % (STDLIB_HEAVY,))
    # -S: no site (this machine's site and usercustomize load typing, re and enum before any test code);
    # the worktree comes first on sys.path as the script directory of -c.
    proc = subprocess.run([sys.executable, "-S", "-c", program], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1].split() if proc.stdout.strip() else []


def test_importing_record_imports_nothing_heavy():
    assert _new_modules("import shmguard.record") == []


def test_health_path_imports_nothing_heavy():
    code = ("from shmguard import main\n"
            "from shmguard.probe.snapshot import take_snapshot\n"
            "take_snapshot()\n"
            "main(['health', '--min-free', '1'])")
    assert _new_modules(code) == []
