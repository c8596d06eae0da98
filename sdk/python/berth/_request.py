"""A call of berth's API as plain data (`Request`), and the helpers every call builder
shares; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote

Params = List[Tuple[str, str]]


@dataclass(frozen=True)
class Request:
    """One call: its method, path and query, a JSON body or raw bytes, extra headers, the
    box it is about (its errors may be a failed start, [`BoxFailed`]), and whether its
    answer may take as long as the box's program (`unbounded`: no read timeout)."""

    method: str
    path: str
    params: Params = field(default_factory=list)
    json: Any = None
    content: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    box: Optional[str] = None
    unbounded: bool = False


def box_path(ref: str, *rest: str) -> str:
    return "/v1/boxes/" + "/".join(quote(part, safe="") for part in (ref, *rest))


def drop_none(fields: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def path(*parts: str) -> str:
    """An API path of `parts`, each quoted as one segment."""
    return "/v1/" + "/".join(quote(part, safe="") for part in parts)
