"""Turning results into JSON-ready data whose field names are the public attribute names."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any

__all__ = ["to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Convert dataclasses, pydantic models, addresses, paths and ranges into JSON data.

    Dataclass fields keep their names; properties listed in a class's ``__json_extra__`` tuple
    (derived facts such as ``usable``) are added after the fields.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    fields: dict[str, Any] | None = None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif callable(getattr(value, "model_dump", None)):  # a pydantic model, imported lazily
        fields = value.model_dump()
    if fields is not None:
        extra = getattr(type(value), "__json_extra__", ())
        fields.update((name, getattr(value, name)) for name in extra)
        return {name: to_jsonable(item) for name, item in fields.items()}
    if isinstance(value, Enum):
        return to_jsonable(value.value)
    if isinstance(
        value,
        (
            ipaddress.IPv4Address,
            ipaddress.IPv6Address,
            ipaddress.IPv4Interface,
            ipaddress.IPv6Interface,
            ipaddress.IPv4Network,
            ipaddress.IPv6Network,
            PurePath,
        ),
    ):
        return str(value)
    if isinstance(value, range):
        return list(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    return str(value)
