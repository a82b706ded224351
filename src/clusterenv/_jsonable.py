"""Turning results into JSON-ready data whose field names are the public attribute names.

Every public result type has a ``to_dict()`` built with :func:`json_fields`: its fields, then
the derived facts it names explicitly (e.g. ``usable`` on an RDMA device). :func:`to_jsonable`
converts anything else (addresses, paths, ranges, mappings, sequences) and calls ``to_dict()``
on nested results, so the CLI's ``--json`` is exactly what ``to_dict()`` returns.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any

__all__ = ["json_fields", "to_jsonable"]


def json_fields(value: Any, **derived: Any) -> dict[str, Any]:
    """``value``'s fields (a dataclass or a pydantic model) in declaration order, then
    ``derived``, each converted with :func:`to_jsonable`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
    else:  # a pydantic model, imported lazily by its module
        names = list(type(value).model_fields)
    data = {name: to_jsonable(getattr(value, name)) for name in names}
    data.update((name, to_jsonable(item)) for name, item in derived.items())
    return data


def to_jsonable(value: Any) -> Any:
    """Convert results, dataclasses, pydantic models, addresses, paths and ranges into JSON data.

    A value with a ``to_dict()`` method gives what that returns.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return to_dict()
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)) or callable(
        getattr(value, "model_dump", None)
    ):
        return json_fields(value)
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
