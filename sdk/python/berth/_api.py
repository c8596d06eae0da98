"""The calls of berth's API as plain data, with no I/O: each function builds the [`Request`]
of one call, and the decoders turn what comes back into models. The clients only send the
requests and feed the answers here, so the call shapes are written once (docs/api.md has
each call)."""

from __future__ import annotations

from email.message import Message
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from ._api_account import (  # noqa: F401 (the clients reach every call through `_api`)
    create_key,
    create_tenant,
    create_webhook,
    delete_secret,
    delete_webhook,
    get_tenant,
    get_webhook,
    health,
    list_keys,
    list_secrets,
    list_templates,
    list_tenants,
    list_web_sessions,
    list_webhooks,
    pair,
    reload_templates,
    revoke_key,
    revoke_web_session,
    runtimes,
    set_secret,
    update_tenant,
    webhook_deliveries,
    webhook_test,
)
from ._request import Params, Request, box_path, drop_none
from ._streams import (  # noqa: F401 (the clients read streams through `_api`)
    ExecCollector,
    OutputCallback,
    OutputCursor,
    Reconnects,
    SseParser,
    TurnFilter,
    cut,
    output_frame,
    watch_event,
)
from .errors import BerthError, BoxFailed, Unavailable
from .models import BoxInfo

Command = Union[str, Sequence[str]]


# Boxes


def failed_start(error: Unavailable, box: Optional[BoxInfo]) -> BerthError:
    """A `503` on a box's call is a failed start when the box is now `failed`: the API says
    so only in the box's state, which the client looked up (`None`: it could not)."""
    if box is None or box.state != "failed":
        return error
    return BoxFailed(
        error.message, reason=box.state_reason, failure=box.failure, status=error.status
    )


def create_box(name: str, fields: Mapping[str, Any]) -> Request:
    return Request("POST", "/v1/boxes", json={"name": name, **drop_none(fields)})


def list_boxes(labels: Optional[Mapping[str, str]], state: Optional[str]) -> Request:
    params = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    if state is not None:
        params.append(("state", state))
    return Request("GET", "/v1/boxes", params=params)


def get_box(ref: str) -> Request:
    return Request("GET", box_path(ref))


def delete_box(ref: str) -> Request:
    return Request("DELETE", box_path(ref), box=ref)


def update_box(ref: str, fields: Mapping[str, Any]) -> Request:
    return Request("PATCH", box_path(ref), json=drop_none(fields), box=ref)


def box_verb(ref: str, verb: str, body: Optional[Dict[str, Any]] = None) -> Request:
    """`start`, `stop`, `pause`, `resume` or `snapshot`; a start or resume may take as
    long as a cold boot (a VM's: up to its boot deadline), so it waits without a limit."""
    return Request(
        "POST", box_path(ref, verb), json=body, box=ref, unbounded=True
    )


# Backups (a whole box as one file; `_local` has the local file's side)

ZSTD = "application/zstd"


def backup_box(ref: str) -> Request:
    """The box as one zstd-compressed tar, streamed; staging a running box's volume holds
    it still for a moment first, so the answer may take a while to start."""
    return Request("GET", box_path(ref, "backup"), box=ref, unbounded=True)


def restore_backup(body: Any, size: Optional[int], to: Mapping[str, Optional[str]]) -> Request:
    """A backup's bytes (`body`, streamed; `size` when known, sent as its length) made into
    a new box: the daemon reads and checks the whole archive before it makes anything.
    `to` holds `name`, `tenant`, `runtime` and `template`, each left out when `None`."""
    headers = {"Content-Type": ZSTD}
    if size is not None:
        headers["Content-Length"] = str(size)
    params = [(key, value) for key, value in to.items() if value is not None]
    return Request(
        "POST", "/v1/backups/restore", params=params, content=body, headers=headers,
        unbounded=True,
    )


def backup_file_name(disposition: Optional[str]) -> Optional[str]:
    """The file name a backup's `Content-Disposition` gives
    (`NAME-YYYYMMDDTHHMMSSZ.tar.zst`), or `None` when it gives none a local file may take
    as it is (a path, a hidden name, a control character)."""
    if not disposition:
        return None
    header = Message()
    header["Content-Disposition"] = disposition
    name = header.get_filename()
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 255
        or name.startswith(".")
        or any(c in name for c in "/\\")
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        return None
    return name


# Exec


def argv(cmd: Command) -> List[str]:
    """A command line: a string runs through `sh -c`, a sequence as it is."""
    return ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


def exec_body(
    cmd: Command,
    *,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    user: Optional[str],
    stdin: Optional[Union[str, bytes]],
    timeout: Optional[float],
) -> Dict[str, Any]:
    if isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8")
    return drop_none(
        {
            "cmd": argv(cmd),
            "cwd": cwd,
            "env": dict(env) if env else None,
            "user": user,
            "stdin": stdin,
            "timeout_s": None if timeout is None else max(1, int(round(timeout))),
        }
    )


def exec_request(ref: str, body: Dict[str, Any], stream: bool) -> Request:
    """A collected exec answers when the command ends (after its `timeout_s`, 60 by
    default, at the latest); a streamed one as it goes."""
    headers = {"Accept": "application/x-ndjson"} if stream else {}
    return Request(
        "POST", box_path(ref, "exec"), json=body, headers=headers, box=ref,
        unbounded=True,
    )


# Background processes


def spawn_body(
    body: Dict[str, Any], *, open_stdin: bool, keep_awake: Optional[bool]
) -> Dict[str, Any]:
    """An [`exec_body`] made a background process's."""
    body = {**body, "background": True}
    if open_stdin:
        body["open_stdin"] = True
    if keep_awake is not None:
        body["keep_awake"] = keep_awake
    return body


def list_processes(ref: str) -> Request:
    return Request("GET", box_path(ref, "processes"), box=ref)


def process_output(ref: str, pid: str, offset: int) -> Request:
    return Request(
        "GET", box_path(ref, "processes", pid, "output"), params=[("offset", str(offset))],
        box=ref, unbounded=True,
    )


def process_stdin(ref: str, pid: str, data: Any, close: bool) -> Request:
    return Request(
        "POST", box_path(ref, "processes", pid, "stdin"),
        params=[("close", "true")] if close else [],
        content=data, headers={"Content-Type": "application/octet-stream"}, box=ref,
        unbounded=True,
    )


def process_signal(ref: str, pid: str, signal: str) -> Request:
    name = signal.upper()
    name = name[3:] if name.startswith("SIG") else name
    return Request("POST", box_path(ref, "processes", pid, "signal"), json={"signal": name}, box=ref)


# Services (the daemons a box's template declares)


def list_services(ref: str) -> Request:
    return Request("GET", box_path(ref, "services"), box=ref)


def service_logs(ref: str, name: str, offset: int, follow: bool) -> Request:
    params = [("offset", str(offset)), ("follow", "true" if follow else "false")]
    return Request(
        "GET", box_path(ref, "services", name, "logs"), params=params, box=ref, unbounded=True
    )


def restart_service(ref: str, name: str) -> Request:
    """Wakes the box first: it may take as long as a cold boot."""
    return Request("POST", box_path(ref, "services", name, "restart"), box=ref, unbounded=True)


# Desktop (computer use on a box whose template has one)


def desktop_status(ref: str) -> Request:
    """Wakes the box and waits for its desktop: it may take as long as a cold boot."""
    return Request("GET", box_path(ref, "desktop"), box=ref, unbounded=True)


def desktop_screenshot(ref: str, cursor: bool) -> Request:
    params = [("cursor", "true" if cursor else "false")]
    return Request(
        "GET", box_path(ref, "desktop", "screenshot"), params=params, box=ref, unbounded=True
    )


def desktop_actions(ref: str, actions: Sequence[Mapping[str, Any]]) -> Request:
    """As long as the actions take (waits, typing), after the box's wake."""
    return Request(
        "POST",
        box_path(ref, "desktop", "actions"),
        json={"actions": [dict(a) for a in actions]},
        box=ref,
        unbounded=True,
    )


def desktop_cursor(ref: str) -> Request:
    return Request("GET", box_path(ref, "desktop", "cursor"), box=ref, unbounded=True)


# Files


def _file_params(path: str, user: Optional[str], *extra: Tuple[str, str]) -> Params:
    params = [("path", path), *extra]
    if user is not None:
        params.append(("user", user))
    return params


def read_file(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files"), params=_file_params(path, user), box=ref,
                   unbounded=True)


def write_file(ref: str, path: str, data: Any, mode: Optional[int], user: Optional[str]) -> Request:
    extra = [("mode", str(mode))] if mode is not None else []
    return Request(
        "PUT", box_path(ref, "files"), params=_file_params(path, user, *extra), content=data,
        headers={"Content-Type": "application/octet-stream"}, box=ref, unbounded=True,
    )


def list_files(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "list"), params=_file_params(path, user), box=ref)


def stat_file(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "stat"), params=_file_params(path, user), box=ref)


def _recursive(recursive: bool) -> List[Tuple[str, str]]:
    return [("recursive", "true")] if recursive else []


def make_dir(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("POST", box_path(ref, "files", "mkdir"), params=params, box=ref)


def remove_file(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("DELETE", box_path(ref, "files"), params=params, box=ref)


def read_archive(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "archive"), params=_file_params(path, user),
                   box=ref, unbounded=True)


def write_archive(ref: str, path: str, tar: Any, user: Optional[str]) -> Request:
    return Request(
        "PUT", box_path(ref, "files", "archive"), params=_file_params(path, user), content=tar,
        headers={"Content-Type": "application/x-tar"}, box=ref, unbounded=True,
    )


def watch_files(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("GET", box_path(ref, "files", "watch"), params=params, box=ref, unbounded=True)


# Memory (read without waking the box)


def memory_rel(path: str) -> str:
    """A path below `/memory` as the daemon takes it: a leading `/memory/` or `/` taken
    off (the daemon checks the rest)."""
    if path == "/memory" or path.startswith("/memory/"):
        path = path[len("/memory"):]
    return path.lstrip("/")


def memory_tree(ref: str, path: str) -> Request:
    rel = memory_rel(path)
    return Request("GET", box_path(ref, "memory"), params=[("path", rel)] if rel else [], box=ref)


def memory_file(ref: str, path: str) -> Request:
    """The file's `/`s kept, each segment quoted; a `.` or `..` one as `%2E`s, which no URL
    normalizing takes away, so the daemon sees it and refuses it."""
    segments = [quote(s, safe="") if s.strip(".") else s.replace(".", "%2E")
                for s in memory_rel(path).split("/")]
    return Request("GET", box_path(ref, "memory") + "/" + "/".join(segments), box=ref)


# Messages and events


def post_message(ref: str, content: str, key: Optional[str]) -> Request:
    body = {"content": content, **({"id": key} if key else {})}
    return Request("POST", box_path(ref, "messages"), json=body, box=ref)


def turn_start(posted: Mapping[str, Any]) -> int:
    """Where a posted message's turn is read from: its `events_after`, the box's newest
    event seq when the message was first stored (the same on a repost, even once
    answered). A daemon older than that field does not say: its turn is read from the
    log's start, which holds the result whenever it comes (and earlier turns' events)."""
    after = posted.get("events_after")
    return after if isinstance(after, int) else 0


def event_page(ref: str, after: int) -> Request:
    params = [("after", str(after)), ("wait", "false")]
    return Request("GET", box_path(ref, "events"), params=params, box=ref)


def event_stream(ref: str, after: int) -> Request:
    return Request(
        "GET", box_path(ref, "events"), params=[("after", str(after))],
        headers={"Accept": "text/event-stream"}, box=ref, unbounded=True,
    )


# Ports and share links


def port_urls(ref: str, port: int) -> Request:
    return Request("GET", box_path(ref, "ports"), params=[("port", str(port))], box=ref)


def share_port(ref: str, port: int, ttl_s: int) -> Request:
    return Request("POST", box_path(ref, "ports", str(port), "links"), json={"ttl_s": ttl_s}, box=ref)


def list_links(ref: str, port: Optional[int]) -> Request:
    path = box_path(ref, "links") if port is None else box_path(ref, "ports", str(port), "links")
    return Request("GET", path, box=ref)


def revoke_link(ref: str, link_id: str, port: Optional[int]) -> Request:
    """Under the box's links, or its `port`'s (then a link of another port is not found)."""
    rest = ("links", link_id) if port is None else ("ports", str(port), "links", link_id)
    return Request("DELETE", box_path(ref, *rest), box=ref)


def port_request(
    ref: str,
    port: int,
    path: str,
    method: str,
    params: Optional[Mapping[str, str]],
    headers: Optional[Mapping[str, str]],
    content: Any,
) -> Request:
    """One request to the app on the box's `port`, `path` being the app's (its slashes
    kept); the app's answer, whatever its status, is the caller's to read."""
    app_path = quote(path.lstrip("/"), safe="/:@!$&'()*+,;=-._~%")
    return Request(
        method.upper(), box_path(ref, "ports", str(port)) + "/" + app_path,
        params=list((params or {}).items()), content=content, headers=dict(headers or {}),
        box=ref, unbounded=True,
    )


# A box's wakeups, messages and egress audit


def _page(after: int, limit: Optional[int]) -> Params:
    return [("after", str(after))] + ([("limit", str(limit))] if limit is not None else [])


def create_wakeup(ref: str, message: str, schedule: Mapping[str, Any]) -> Request:
    body = {"message": message, **drop_none(schedule)}
    return Request("POST", box_path(ref, "wakeups"), json=body, box=ref)


def list_wakeups(ref: str) -> Request:
    return Request("GET", box_path(ref, "wakeups"), box=ref)


def delete_wakeup(ref: str, wakeup_id: str) -> Request:
    return Request("DELETE", box_path(ref, "wakeups", wakeup_id), box=ref)


def list_messages(ref: str, after: int, limit: Optional[int]) -> Request:
    return Request("GET", box_path(ref, "messages"), params=_page(after, limit), box=ref)


def egress_audit(ref: str, after: int, limit: Optional[int]) -> Request:
    return Request("GET", box_path(ref, "egress"), params=_page(after, limit), box=ref)
