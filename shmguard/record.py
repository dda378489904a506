"""A minimal immutable record type, because `shmguard health` cannot afford `dataclasses`.

`import dataclasses` pulls in inspect, re, enum and ast: about 17 ms in the demo
container, where a bare `python -c pass` costs about as much. The healthcheck
runs every few seconds in every training container and must stay within 1.2x
of that, so the data types it touches (mounts, cgroup limits, the job, probe
results) are Records: fields declared in __slots__, keyword construction with
defaults, equality, repr and as_dict, and no assignment after construction.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see above); type checkers read it so
if TYPE_CHECKING:
    from typing import Any



class Record:
    __slots__: tuple[str, ...] = ()
    _defaults: dict = {}

    if TYPE_CHECKING:  # fields are declared in __slots__, which type checkers do not read: let them through
        def __getattr__(self, name: str) -> "Any": ...

    def __init__(self, **fields) -> None:
        cls = type(self)
        setter = object.__setattr__
        defaults = cls._defaults
        given = 0
        for name in cls.__slots__:
            if name in fields:
                setter(self, name, fields[name])
                given += 1
            elif name in defaults:
                setter(self, name, defaults[name])
            else:
                raise TypeError(f"{cls.__name__} needs {name!r}")
        if given != len(fields):
            unknown = sorted(set(fields) - set(cls.__slots__))
            raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def replace(self, **changes):
        """A copy with some fields changed."""
        return type(self)(**{**self.as_dict(shallow=True), **changes})

    def as_dict(self, shallow: bool = False) -> dict:
        out = {}
        for name in type(self).__slots__:
            value = getattr(self, name)
            if not shallow:
                value = _plain(value)
            out[name] = value
        return out

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in type(self).__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(_hashable(getattr(self, n)) for n in type(self).__slots__))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__slots__)
        return f"{type(self).__name__}({inner})"


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
