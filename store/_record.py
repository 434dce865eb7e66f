"""The base of the store's vocabulary (``store.models``): a frozen record with its fields
declared once, validated where data enters and built as it is from what the store wrote.

A class declares each field once, ``name: type = field(check, default)``, in the order its JSON
is written. ``Cls(**values)`` and ``Cls.model_validate(obj)`` run each field's check and raise
``ValidationError`` naming every bad field by its path; ``Cls.trusted(values)`` makes ``values``
the instance's ``__dict__`` (one allocation; a field left out reads the class default), and
``Cls.from_stored(data)`` does so for JSON the store wrote, nested records included.

Plain classes with a ``__dict__``, not slotted ones: a slotted record is filled one slot at a
time, while this one takes the parsed JSON object whole (building a 20,000-message history's
40,000 blocks: ~8 ms this way, ~22 ms slot by slot or through pydantic's ``model_construct``).
No pydantic here: the CLI's read-only fast path imports this.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Literal, TypeVar


class ValidationError(ValueError):
    """Data that does not fit a model: each error's path (``loc``), message and ``type``
    (``missing``, ``extra_forbidden`` or ``invalid``), as ``errors()`` lists them."""

    def __init__(self, title: str, errors: list[tuple[tuple[str | int, ...], str, str]]) -> None:
        self.title = title
        self._errors = errors
        lines = [f"{len(errors)} validation error{'s' * (len(errors) != 1)} for {title}"]
        for loc, msg, _ in errors:
            lines += [".".join(map(str, loc)) or "(input)", f"  {msg}"]
        super().__init__("\n".join(lines))

    def errors(self) -> list[dict[str, Any]]:
        return [{"loc": loc, "msg": msg, "type": kind} for loc, msg, kind in self._errors]

    def error_count(self) -> int:
        return len(self._errors)


Loc = tuple[str | int, ...]
Check_ = Callable[[Any, Loc], Any]
"""A field's check: the value as the model keeps it, or ``ValidationError``."""


def bad(loc: Loc, msg: str) -> ValidationError:
    return ValidationError("value", [(loc, msg, "invalid")])


def text(min_length: int = 0, max_length: int | None = None) -> Check_:
    def check(v: Any, loc: Loc) -> str:
        if not isinstance(v, str):
            raise bad(loc, "Input should be a valid string")
        plain = str(v)  # a str subclass (an enum's member) as its plain text
        if len(plain) < min_length:
            raise bad(loc, f"String should have at least {min_length} character")
        if max_length is not None and len(plain) > max_length:
            raise bad(loc, f"String should have at most {max_length} characters")
        return plain

    return check


def integer(v: Any, loc: Loc) -> int:
    if type(v) is int:
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return int(v)
    raise bad(loc, "Input should be a valid integer")


def count(v: Any, loc: Loc) -> int:
    n = integer(v, loc)
    if n < 0:
        raise bad(loc, "Input should be greater than or equal to 0")
    return n


def number(v: Any, loc: Loc) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    raise bad(loc, "Input should be a valid number")


def flag(v: Any, loc: Loc) -> bool:
    if isinstance(v, bool):
        return v
    raise bad(loc, "Input should be a valid boolean")


def mapping(v: Any, loc: Loc) -> dict[str, Any]:
    if isinstance(v, dict):
        return v
    raise bad(loc, "Input should be a valid dictionary")


def moment(v: Any, loc: Loc) -> datetime:
    if isinstance(v, str):
        try:
            v = datetime.fromisoformat(v)
        except ValueError:
            raise bad(loc, "Input should be a valid datetime") from None
    if isinstance(v, datetime):
        return v
    raise bad(loc, "Input should be a valid datetime")


def one_of(*choices: str) -> Check_:
    quoted = [repr(c) for c in choices]
    said = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def check(v: Any, loc: Loc) -> str:
        if isinstance(v, str) and v in choices:
            return str(v)
        raise bad(loc, f"Input should be {said}")

    return check


def enum(cls: type[Enum]) -> Check_:
    def check(v: Any, loc: Loc) -> Any:
        try:
            return cls(v)
        except ValueError:
            raise bad(loc, f"Input should be one of {[m.value for m in cls]}") from None

    return check


def optional(check: Check_) -> Check_:
    def maybe(v: Any, loc: Loc) -> Any:
        return None if v is None else check(v, loc)

    return _holding(maybe, check, many=False)


def list_of(check: Check_, min_length: int = 0) -> Check_:
    def each(v: Any, loc: Loc) -> list[Any]:
        if not isinstance(v, list | tuple):
            raise bad(loc, "Input should be a valid list")
        if len(v) < min_length:
            raise bad(loc, f"List should have at least {min_length} item after validation")
        out, errors = [], []
        for i, item in enumerate(v):
            try:
                out.append(check(item, (*loc, i)))
            except ValidationError as err:
                errors += err._errors
        if errors:
            raise ValidationError("value", errors)
        return out

    return _holding(each, check, many=True)


def model(cls: type[M]) -> Check_:
    def check(v: Any, loc: Loc) -> M:
        return cls.model_validate(v, _loc=loc)

    check.holds = (cls, False)  # type: ignore[attr-defined]
    return check


def _holding(outer: Check_, inner: Check_, *, many: bool) -> Check_:
    """``outer`` marked as holding what ``inner`` holds (a record, or a list of them): what
    ``from_stored`` builds nested."""
    held = getattr(inner, "holds", None)
    if held is not None:
        outer.holds = (held[0], many or held[1])  # type: ignore[attr-defined]
    return outer


def strs(v: Any, loc: Loc) -> list[str]:
    return list_of(text())(v, loc)  # type: ignore[no-any-return]


def span(v: Any, loc: Loc) -> tuple[int, int]:
    if isinstance(v, list | tuple) and len(v) == 2:
        return (integer(v[0], (*loc, 0)), integer(v[1], (*loc, 1)))
    raise bad(loc, "Input should be a pair of integers")


REQUIRED: Any = object()
"""A field's default when it has none."""


class _Fresh:
    """A default made anew for each validated instance (an empty list or dict)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


LIST: Any = _Fresh(list)
DICT: Any = _Fresh(dict)


# ----------------------------------------------------------------- the base


_new = object.__new__


class _Field:
    """A field's declaration (``field``), replaced by its default when its class is made."""

    __slots__ = ("check", "default")

    def __init__(self, check: Check_, default: Any) -> None:
        self.check = check
        self.default = default


def field(check: Check_, default: Any = REQUIRED) -> Any:
    """``name: type = field(check, default)`` in a ``Model``'s body: the field, in its JSON's
    order. ``default``: REQUIRED (none), a value, or LIST/DICT (a new empty one each time)."""
    return _Field(check, default)


class Model:
    """A frozen record: its fields (declared with ``field``) in their JSON's order, its values in
    its ``__dict__`` (a field left out there reads the class's default)."""

    _spec: ClassVar[tuple[tuple[str, Check_, Any], ...]] = ()
    _names: ClassVar[frozenset[str]] = frozenset()
    _holds: ClassVar[dict[str, tuple[type[Model], bool]]] = {}
    _fresh: ClassVar[tuple[tuple[str, _Fresh], ...]] = ()
    _required: ClassVar[tuple[str, ...]] = ()
    field_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        own = [(k, v) for k, v in cls.__dict__.items() if isinstance(v, _Field)]
        cls._spec = (*cls._spec, *((k, f.check, f.default) for k, f in own))
        cls._names = frozenset(name for name, _, _ in cls._spec)
        cls.field_names = tuple(name for name, _, _ in cls._spec)
        cls._holds = {n: c.holds for n, c, _ in cls._spec if hasattr(c, "holds")}
        cls._fresh = tuple((n, d) for n, _, d in cls._spec if isinstance(d, _Fresh))
        cls._required = tuple(n for n, _, d in cls._spec if d is REQUIRED)
        for name, f in own:  # what a trusted build may leave out reads the class's default
            if f.default is REQUIRED or isinstance(f.default, _Fresh):
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)

    def __init__(self, **values: Any) -> None:
        _SET_DICT(self, _validated(type(self), values, ()))

    @classmethod
    def trusted(cls: type[M], values: dict[str, Any]) -> M:
        """An instance of values already valid (what the store wrote, parts already built): no
        validation, ``values`` becomes its ``__dict__``. A field left out is the class default."""
        m = _new(cls)
        _SET_DICT(m, values)
        return m

    @classmethod
    def from_stored(cls: type[M], data: Any) -> M:
        """A value the store wrote itself (its ``model_dump(mode="json", exclude_none=True)``,
        decoded): built with its nested records, no value checked. A key the class does not
        have, or a required one missing, and it is validated in full instead."""
        try:
            return cls.trusted(_as_written(cls, data))
        except _Unknown:
            return cls.model_validate(data)

    @classmethod
    def model_validate(cls: type[M], obj: Any, *, _loc: Loc = ()) -> M:
        if isinstance(obj, cls):
            return obj
        if hasattr(obj, "model_dump"):  # another of ours, or an edge's pydantic model
            obj = obj.model_dump()
        if not isinstance(obj, dict):
            raise ValidationError(
                cls.__name__,
                [(_loc, f"Input should be a valid dictionary or {cls.__name__}", "invalid")],
            )
        return cls.trusted(_validated(cls, obj, _loc))

    @classmethod
    def model_validate_json(cls: type[M], text: str | bytes) -> M:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ValidationError(cls.__name__, [((), f"Invalid JSON: {err}", "invalid")]) from None
        return cls.model_validate(data)

    def model_dump(
        self,
        *,
        mode: Literal["python", "json"] = "python",
        exclude_none: bool = False,
        exclude: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        skip = frozenset(exclude or ())
        json_mode = mode == "json"
        values, cls = self.__dict__, type(self)
        for name in self.field_names:
            if name in skip:
                continue
            v = values[name] if name in values else getattr(cls, name)
            if v is None:
                if not exclude_none:
                    out[name] = None
            elif type(v) in _PLAIN:  # most values of a block: written as they are
                out[name] = v
            else:
                out[name] = _dump(v, json_mode, exclude_none)
        return out

    def model_dump_json(self, *, exclude_none: bool = False) -> str:
        """``model_dump(mode="json")`` as compact JSON text."""
        data = self.model_dump(mode="json", exclude_none=exclude_none)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    def model_copy(self: M, *, update: dict[str, Any] | None = None) -> M:
        values = {name: getattr(self, name) for name in self.field_names}
        return type(self).trusted({**values, **(update or {})})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.field_names)

    def __hash__(self) -> int:
        return hash((type(self), *(_hashable(getattr(self, n)) for n in self.field_names)))

    def __repr__(self) -> str:
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.field_names)
        return f"{type(self).__name__}({body})"


M = TypeVar("M", bound=Model)
_SET_DICT: Callable[[object, dict[str, Any]], None] = Model.__dict__["__dict__"].__set__
"""Sets an instance's ``__dict__`` (past the frozen ``__setattr__``): one C call."""


class _Unknown(Exception):
    """Not a shape the store writes: validate it."""


def _as_written(cls: type[Model], data: Any) -> dict[str, Any]:
    """``data`` (decoded JSON the store wrote) with its nested records built and the defaults
    its JSON leaves out filled in, in place."""
    if type(data) is not dict:
        raise _Unknown
    holds = cls._holds
    for key, value in data.items():
        if key not in cls._names:
            raise _Unknown
        held = holds.get(key)
        if held is not None and value is not None:
            sub, many = held
            if not many:
                data[key] = sub.trusted(_as_written(sub, value))
            elif type(value) is list:
                data[key] = [sub.trusted(_as_written(sub, v)) for v in value]
            else:
                raise _Unknown
    for name, default in cls._fresh:
        if name not in data:
            data[name] = default.make()
    for name in cls._required:
        if name not in data:
            raise _Unknown
    return data


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


def _validated(cls: type[Model], obj: dict[str, Any], loc: Loc) -> dict[str, Any]:
    """``obj`` checked against ``cls``'s fields: every field, in order, defaults filled in."""
    errors: list[tuple[Loc, str, str]] = []
    values: dict[str, Any] = {}
    for name, check, default in cls._spec:
        if name in obj:
            try:
                values[name] = check(obj[name], (*loc, name))
            except ValidationError as err:
                errors += err._errors
        elif default is REQUIRED:
            errors.append(((*loc, name), "Field required", "missing"))
        else:
            values[name] = default.make() if isinstance(default, _Fresh) else default
    for key in obj:
        if key not in cls._names:
            errors.append(((*loc, key), "Extra inputs are not permitted", "extra_forbidden"))
    if errors:
        raise ValidationError(cls.__name__, errors)
    return values


_PLAIN = frozenset({str, int, bool, float})


def _dump(v: Any, json_mode: bool, exclude_none: bool) -> Any:
    if isinstance(v, Model):
        return v.model_dump(mode="json" if json_mode else "python", exclude_none=exclude_none)
    if isinstance(v, list):
        return [_dump(x, json_mode, exclude_none) for x in v]
    if isinstance(v, tuple):
        items = [_dump(x, json_mode, exclude_none) for x in v]
        return items if json_mode else tuple(items)
    if isinstance(v, dict):
        return {k: _dump(x, json_mode, exclude_none) for k, x in v.items()}
    if json_mode:
        if isinstance(v, Enum):
            return v.value
        if isinstance(v, datetime):
            return json_time(v)
    return v


def json_time(at: datetime) -> str:
    """A datetime as the JSON of the ``--json`` outputs writes it: ISO 8601, ``Z`` for UTC."""
    text = at.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
