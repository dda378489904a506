"""Records: shmguard's one way to declare plain data. Every record in shmguard is a Record.

    class Step(Record):
        workers: int
        prefetch_factor: int = 2
        notes: list[str] = field(default_factory=list)

    class TemplateResult(Record, frozen=False):  # filled in as the sizer goes
        status: str = ""

A Record is declared as a dataclass is (annotated fields in order, defaults, a
`field(default_factory=...)` for mutable ones, fields inherited from a parent
record) and gives what shmguard used from dataclasses: construction by position
or keyword in field order, immutability unless `frozen=False`, `replace()`,
`as_dict()`, equality, a hash for frozen records, repr, pickling, and generated
`__slots__`; `fields()` stands for dataclasses.fields (names only). A class
that defines its own `__init__`, property or method keeps it; its `__init__`
calls `super().__init__(...)`. As with dataclasses, a field
without a default cannot follow one with a default, and a frozen record cannot
extend a mutable one (nor the reverse); unlike them, a list, dict or set default
is refused outright (use a factory), and the hash of a frozen record accepts
lists and dicts inside it.

Mutable (`frozen=False`) only for a record that is filled in or adjusted after
it is made (podspec's TemplateResult, templates' PodTemplate, yamlio's
Document, ...); a record whose lists change in place but whose fields are never
reassigned stays frozen. Two classes with state are deliberately not records,
because they are not plain data: probe.Root (the filesystem the probes read,
replaced by fakes in tests) and yamlio.Node (one per YAML node on the patch
path, where a Record's constructor would cost about a second per 10,000
Deployments; nodes compare by identity). Each says so in its docstring.

Why not dataclasses: `shmguard health` runs every few seconds in every training
container and must stay within 1.2x of a bare `python -c pass`, and
`import dataclasses` pulls in inspect, re, enum and ast: about 17 ms in the
demo container, where the bare interpreter costs about 10 ms. So this module
imports nothing at all (not typing either), and the rest of shmguard uses it
too, so that data reads the same everywhere and a record can move onto the
health path without being rewritten. Type checkers see it as a dataclass
through PEP 681's `dataclass_transform`, declared only for them.

Annotations are only read as names (they are strings under
`from __future__ import annotations`); a `ClassVar[...]` annotation is a class
attribute, not a field.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see above); type checkers read it so
if TYPE_CHECKING:
    from typing import Any, Callable

    from typing_extensions import Self, dataclass_transform
else:
    def dataclass_transform(**_options):
        return lambda cls: cls


MISSING = object()  # no default given


class _Field:
    __slots__ = ("default", "default_factory")

    def __init__(self, default, default_factory) -> None:
        self.default, self.default_factory = default, default_factory


def field(*, default: "Any" = MISSING, default_factory: "Callable[[], Any] | Any" = MISSING) -> "Any":
    """A field's default (`field(default=())`) or, for a mutable one, the factory that makes a fresh one
    for every record (`field(default_factory=list)`), as dataclasses.field."""
    if default is not MISSING and default_factory is not MISSING:
        raise TypeError("field() takes a default or a default_factory, not both")
    if default is MISSING and default_factory is MISSING:
        raise TypeError("field() needs a default or a default_factory")
    return _Field(default, default_factory)


def _annotations(namespace: dict) -> dict:
    """The class body's annotations, in order. Python 3.14 makes them on demand (PEP 649) unless the module
    has `from __future__ import annotations`; then they are evaluated here (annotationlib.Format.VALUE)."""
    annotations = namespace.get("__annotations__")
    if annotations is None:
        annotate = namespace.get("__annotate__") or namespace.get("__annotate_func__")
        annotations = annotate(1) if callable(annotate) else None
    return annotations or {}


def _is_classvar(annotation) -> bool:
    """Whether an annotation is typing.ClassVar[...] (`ClassVar[int]`, `typing.ClassVar[int]`): a class
    attribute, not a field. An evaluated one (a module without `from __future__ import annotations`) is
    looked at only when generic: typing.ClassVar[int] has an __origin__, int and `int | None` have none."""
    if type(annotation) is not str:
        origin = getattr(annotation, "__origin__", None)
        if origin is None:
            return False
        annotation = repr(origin)
    elif "ClassVar" not in annotation:
        return False
    return annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1] == "ClassVar"


def _frozen_setattr(self, name: str, value: "Any") -> None:
    raise AttributeError(f"{type(self).__name__} is immutable: use replace({name}=...)")


def _frozen_delattr(self, name: str) -> None:
    raise AttributeError(f"{type(self).__name__} is immutable")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class RecordType(type):
    """Makes each Record subclass: reads its fields from the annotations and generates `__slots__`."""

    if TYPE_CHECKING:  # what __new__ sets on every record class
        __record_fields__: tuple[str, ...]
        __record_defaults__: dict[str, Any]
        __record_factories__: dict[str, Callable[[], Any]]
        __record_frozen__: bool

    def __new__(mcls, name: str, bases: tuple, namespace: dict, frozen: "bool | None" = None):
        if "__slots__" in namespace:
            raise TypeError(f"{name}: declare a record's fields as annotations, not __slots__")
        fields: list[str] = []
        defaults: dict = {}
        factories: dict = {}
        parent_frozen = None
        for parent in bases:
            if isinstance(parent, RecordType) and parent.__record_fields__:
                fields += [f for f in parent.__record_fields__ if f not in fields]
                defaults.update(parent.__record_defaults__)
                factories.update(parent.__record_factories__)
                if parent_frozen is None:
                    parent_frozen = parent.__record_frozen__
        if frozen is None:
            frozen = True if parent_frozen is None else parent_frozen
        elif parent_frozen is not None and frozen != parent_frozen:
            raise TypeError(f"{name}: a {'frozen' if frozen else 'mutable'} record cannot extend a "
                            f"{'frozen' if parent_frozen else 'mutable'} one")
        known = set(fields)
        own = []
        for f, annotation in _annotations(namespace).items():
            if (type(annotation) is not str or "ClassVar" in annotation) and _is_classvar(annotation):
                continue
            if f in namespace:
                value = namespace.pop(f)
                if type(value) is _Field:
                    if value.default_factory is not MISSING:
                        factories[f] = value.default_factory
                        defaults.pop(f, None)
                    else:
                        defaults[f] = value.default
                        factories.pop(f, None)
                elif type(value) in (list, dict, set):
                    raise TypeError(f"{name}.{f}: a mutable default would be shared by every record: "
                                    f"use field(default_factory=...)")
                else:
                    defaults[f] = value
                    if factories:
                        factories.pop(f, None)
            if f not in known:
                known.add(f)
                fields.append(f)
                own.append(f)
        if defaults or factories:
            seen_default = None
            for f in fields:
                if f in defaults or f in factories:
                    seen_default = f
                elif seen_default is not None:
                    raise TypeError(f"{name}: field {f!r} without a default follows {seen_default!r}, "
                                    f"which has one")
        namespace["__slots__"] = tuple(own)
        namespace["__match_args__"] = namespace["__record_fields__"] = tuple(fields)
        namespace["__record_defaults__"] = defaults
        namespace["__record_factories__"] = factories
        namespace["__record_frozen__"] = frozen
        if frozen:
            # Only frozen classes get a __setattr__ (not Record itself: mutable ones inherit from it), and
            # once: one in a class's dict, even object's, sends every assignment through a slower lookup.
            if parent_frozen is None and bases:
                namespace.setdefault("__setattr__", _frozen_setattr)
                namespace.setdefault("__delattr__", _frozen_delattr)
        else:
            namespace.setdefault("__hash__", None)  # mutable and compared by value: unhashable, as dataclasses
            if any(getattr(base, "__setattr__", None) is _frozen_setattr for base in bases):  # a field-less base
                namespace.setdefault("__setattr__", object.__setattr__)
                namespace.setdefault("__delattr__", object.__delattr__)
        return type.__new__(mcls, name, bases, namespace)  # type.__init__ lets the frozen keyword pass


class Record(metaclass=RecordType):
    """Plain data: see the module's docstring."""

    def __init__(self, *args: "Any", **kwargs: "Any") -> None:
        cls = type(self)
        names = cls.__record_fields__
        setter = object.__setattr__
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes {len(names)} fields, {len(args)} were given")
        for name, value in zip(names, args):
            setter(self, name, value)
        defaults = cls.__record_defaults__
        for name in names[len(args):]:
            if name in kwargs:
                setter(self, name, kwargs.pop(name))
            elif name in defaults:
                setter(self, name, defaults[name])
            elif name in cls.__record_factories__:
                setter(self, name, cls.__record_factories__[name]())
            else:
                raise TypeError(f"{cls.__name__} needs {name!r}")
        if kwargs:
            name = sorted(kwargs)[0]
            if name in names:
                raise TypeError(f"{cls.__name__} got {name!r} twice, by position and by keyword")
            raise TypeError(f"{cls.__name__} has no field {name!r}")

    def replace(self, **changes: "Any") -> "Self":
        """A copy with some fields changed (dataclasses.replace)."""
        cls = type(self)
        values = {name: getattr(self, name) for name in cls.__record_fields__}
        for name in changes:
            if name not in values:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
        values.update(changes)
        return cls(**values)

    def as_dict(self, shallow: bool = False) -> "dict[str, Any]":
        """The fields by name; unless shallow, records inside become dicts and tuples lists (for JSON)."""
        if shallow:
            return {name: getattr(self, name) for name in type(self).__record_fields__}
        return {name: _plain(getattr(self, name)) for name in type(self).__record_fields__}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in type(self).__record_fields__)

    def __hash__(self) -> int:
        return hash(tuple(_hashable(getattr(self, n)) for n in type(self).__record_fields__))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_fields__)
        return f"{type(self).__name__}({inner})"

    def __reduce__(self):
        return (_rebuild, (type(self), tuple(getattr(self, n) for n in type(self).__record_fields__)))


def _rebuild(cls, values: tuple):
    return cls(*values)


def fields(record_or_class: "Any") -> "tuple[str, ...]":
    """The field names of a record (or record class), in order (dataclasses.fields, names only)."""
    cls = record_or_class if isinstance(record_or_class, RecordType) else type(record_or_class)
    return cls.__record_fields__


def _plain(value):
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _hashable(value):
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value
