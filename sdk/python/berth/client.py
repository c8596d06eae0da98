"""The blocking client: `Berth(url=…, api_key=…)`, its `boxes` and a box's calls; the other
resources (tenants, secrets, templates, webhooks, web) are in their own modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

import httpx

from . import _api, _local
from ._config import resolve
from ._sync import Transport
from ._views import BoxView
from .daemon import Health, Runtime, Templates, runtimes_from
from .desktop import Desktop
from .files import Files
from .memory import Memory
from .messages import Turn, follow
from .models import (
    BoxInfo,
    EgressPage,
    Event,
    EventPage,
    ExecResult,
    Message,
    OutputChunk,
    PortUrls,
    ProcessInfo,
    ServiceInfo,
    ShareLink,
)
from .models_backup import BackupFile, RestoredBackup
from .processes import Process
from .secrets import Secrets
from .tenants import Tenants
from .terminal import Terminal, open_terminal, pty_params
from .wakeups import Wakeups
from .web import Web
from .webhooks import Webhooks

# A cut stream: the daemon restarting, or a proxy dropping the connection.
_CUT = (httpx.ReadError, httpx.RemoteProtocolError)


class Berth:
    """A client of one berth daemon. `url` and `api_key` default to `BERTH_URL` and
    `BERTH_API_KEY`, else to the files of the local daemon's data dir (`data_dir`, else
    `BERTH_DATA_DIR` or the default one). `timeout` bounds each call that is not a stream
    or a command (seconds). Close it (or use it as a context manager) to free its
    connections.

    `boxes`, `tenants`, `secrets`, `templates`, `webhooks` and `web` hold the API's
    resources; `health()` and `runtimes()` ask the daemon itself."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        data_dir: Optional[Union[str, Path]] = None,
        timeout: float = 60.0,
        http: Optional[httpx.Client] = None,
    ) -> None:
        self._transport = Transport(resolve(url, api_key, data_dir), timeout, http)
        self.boxes = Boxes(self._transport)
        self.tenants = Tenants(self._transport)
        self.secrets = Secrets(self._transport)
        self.templates = Templates(self._transport)
        self.webhooks = Webhooks(self._transport)
        self.web = Web(self._transport)

    @property
    def url(self) -> str:
        return self._transport.target.url

    def health(self) -> Health:
        """Whether the daemon answers, and its version (needs no key)."""
        return Health.from_json(self._transport.send(_api.health()).json())

    def runtimes(self) -> List[Runtime]:
        """Every runtime the daemon knows, usable or not."""
        return runtimes_from(self._transport.send(_api.runtimes()).json())

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Berth":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Boxes:
    """The tenant's boxes."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(
        self,
        name: str,
        *,
        template: Optional[str] = None,
        runtime: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        labels: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        **more: Any,
    ) -> "Box":
        """Makes a box (stopped; the next call that needs it starts it). `more` takes the
        other fields of `POST /v1/boxes` (`stop_after_s`, `disk_mib`, `egress`, …)."""
        fields = dict(template=template, runtime=runtime, limits=limits, labels=labels,
                      env=env, **more)
        return self._box(self._t.send(_api.create_box(name, fields)).json())

    def list(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None
    ) -> List["Box"]:
        """The boxes with every one of `labels` and in `state`, when given."""
        answer = self._t.send(_api.list_boxes(labels, state)).json()
        return [self._box(b) for b in answer["boxes"]]

    def get(self, ref: str) -> "Box":
        """A box by its id (`bx_…`) or name."""
        return self._box(self._t.send(_api.get_box(ref)).json())

    def delete(self, ref: str) -> None:
        """Stops the box and deletes it with its volume."""
        self._t.send(_api.delete_box(ref))

    def restore(
        self,
        source: Any,
        *,
        name: Optional[str] = None,
        tenant: Optional[str] = None,
        runtime: Optional[str] = None,
        template: Optional[str] = None,
    ) -> RestoredBackup["Box"]:
        """Makes a new box of a backup (`box.backup`): `source` is the file's path (read a
        chunk at a time, never whole), or its bytes, or an iterable of byte chunks (such as
        `backup_stream()` of a box on another daemon). The new box has a new id, the
        backed-up box's name, settings, volume and memory history unless `name`, `runtime`
        or `template` say otherwise; it is `stopped`. `tenant` (an admin key's): restore
        into that tenant. The daemon checks the whole archive first: a damaged, cut or
        changed one is `InvalidRequest` with the reason, and nothing is made; a taken name
        is `Conflict`."""
        to = dict(name=name, tenant=tenant, runtime=runtime, template=template)
        with _local.upload(source) as (body, size):
            answer = self._t.send(_api.restore_backup(body, size, to)).json()
        return RestoredBackup.from_json(answer, self._box(answer["box"]))

    def _box(self, data: Dict[str, Any]) -> "Box":
        return Box(self._t, BoxInfo.from_json(data))


class Box(BoxView):
    """One box: `info` is the box as last seen (each call that answers the box updates it)."""

    def __init__(self, transport: Transport, info: BoxInfo) -> None:
        self._t = transport
        self.info = info
        self.files = Files(transport, info.id)
        self.memory = Memory(transport, info.id)
        self.wakeups = Wakeups(transport, info.id)
        self.desktop = Desktop(transport, info.id)

    def _set(self, response: httpx.Response) -> "Box":
        self.info = BoxInfo.from_json(response.json())
        return self

    def refresh(self) -> "Box":
        return self._set(self._t.send(_api.get_box(self.id)))

    def start(self, *, runtime: Optional[str] = None) -> "Box":
        """Starts the box (on `runtime` from now on, when given: it must be stopped)."""
        body = {"runtime": runtime} if runtime else None
        return self._set(self._t.send(_api.box_verb(self.id, "start", body)))

    def stop(self) -> "Box":
        return self._set(self._t.send(_api.box_verb(self.id, "stop")))

    def pause(self) -> "Box":
        return self._set(self._t.send(_api.box_verb(self.id, "pause")))

    def resume(self) -> "Box":
        return self._set(self._t.send(_api.box_verb(self.id, "resume")))

    def snapshot(self) -> "Box":
        return self._set(self._t.send(_api.box_verb(self.id, "snapshot")))

    def update(self, **fields: Any) -> "Box":
        """Changes any of `pause_after_s`, `snapshot_after_s`, `stop_after_s`,
        `auto_resume`, `limits`, `disk_mib`, `labels` (whole), `env` (whole)."""
        return self._set(self._t.send(_api.update_box(self.id, fields)))

    def delete(self) -> None:
        self._t.send(_api.delete_box(self.id))

    def backup(self, path: _local.LocalPath) -> BackupFile:
        """Backs the whole box up (its volume, memory history and settings: one
        zstd-compressed tar, `client.boxes.restore` takes it) into the local file `path`,
        or into the directory `path` under the daemon's name for it
        (`NAME-YYYYMMDDTHHMMSSZ.tar.zst`). Streamed to a temporary file beside it (never
        held in memory) and renamed onto the name only once whole: a failed or cut backup
        raises (a cut one `Unavailable`) and leaves no file. The box's state does not
        change (a running one is held still for a moment, where its runtime can)."""
        download = _local.Download(path, f"{self.name}.tar.zst")
        try:
            with self._t.stream(_api.backup_box(self.id)) as response:
                try:
                    for chunk in response.iter_bytes():
                        download.write(chunk)
                except _CUT as e:
                    raise _api.cut("the backup") from e
                given = _api.backup_file_name(response.headers.get("content-disposition"))
                return download.finish(given)
        finally:
            download.abort()

    def backup_stream(self) -> Iterator[bytes]:
        """The box's backup as it comes, in chunks (to send on without a local file); a
        cut stream raises `Unavailable`, so the chunks are a whole backup only once the
        loop ends by itself."""
        with self._t.stream(_api.backup_box(self.id)) as response:
            try:
                yield from response.iter_bytes()
            except _CUT as e:
                raise _api.cut("the backup") from e

    def exec(
        self,
        cmd: _api.Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        stdin: Optional[Union[str, bytes]] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[_api.OutputCallback] = None,
        on_stderr: Optional[_api.OutputCallback] = None,
    ) -> ExecResult:
        """Runs `cmd` (a string through `sh -c`, or a list) to its end, waking the box.
        With `on_stdout`/`on_stderr` the output is streamed to them as it comes (and is
        also in the result). `timeout` (seconds, default 60) kills the process group."""
        body = _api.exec_body(cmd, cwd=cwd, env=env, user=user, stdin=stdin, timeout=timeout)
        if on_stdout is None and on_stderr is None:
            answer = self._t.send(_api.exec_request(self.id, body, stream=False))
            return ExecResult.from_json(answer.json())
        collector = _api.ExecCollector(on_stdout, on_stderr)
        with self._t.stream(_api.exec_request(self.id, body, stream=True)) as response:
            for line in response.iter_lines():
                collector.feed(line)
                if collector.result is not None:
                    return collector.result
        raise _api.cut("the exec stream")

    def spawn(
        self,
        cmd: _api.Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        stdin: Optional[Union[str, bytes]] = None,
        timeout: Optional[float] = None,
        open_stdin: bool = False,
        keep_awake: Optional[bool] = None,
    ) -> Process:
        """Starts `cmd` in the background, waking the box: it runs until it exits (or its
        `timeout`, none by default), whoever watches. `open_stdin=True` keeps its stdin
        open for `write_stdin`; `keep_awake=False` lets the box sleep while it runs."""
        body = _api.exec_body(cmd, cwd=cwd, env=env, user=user, stdin=stdin, timeout=timeout)
        body = _api.spawn_body(body, open_stdin=open_stdin, keep_awake=keep_awake)
        answer = self._t.send(_api.exec_request(self.id, body, stream=False))
        return Process(self._t, self.id, ProcessInfo.from_json(answer.json()))

    def processes(self) -> List[Process]:
        """The box's background processes, running or exited and not yet forgotten (none
        while the box is not running)."""
        answer = self._t.send(_api.list_processes(self.id)).json()
        return [Process(self._t, self.id, ProcessInfo.from_json(p)) for p in answer["processes"]]

    def services(self) -> List[ServiceInfo]:
        """The box's services (the daemons its template declares), in the template's order.
        Does not wake the box: one that is not running lists its template's, `stopped`."""
        answer = self._t.send(_api.list_services(self.id)).json()
        return [ServiceInfo.from_json(s) for s in answer["services"]]

    def service_logs(
        self, name: str, offset: int = 0, follow: bool = False
    ) -> Iterator[OutputChunk]:
        """The service's log from `offset` (stdout and stderr, across its restarts; the box
        keeps the last 256 KiB), as it comes: to the log's end, or with `follow=True` on
        until the box stops (leave the loop to stop reading). A cut connection is resumed
        from the last offset read. The box must be running (`Conflict` otherwise)."""
        cursor = _api.OutputCursor(offset, "the service's log stream")
        while True:
            request = _api.service_logs(self.id, name, cursor.offset, follow)
            try:
                with self._t.stream(request) as response:
                    for line in response.iter_lines():
                        chunk = cursor.feed(line)
                        if chunk is not None:
                            yield chunk
                return
            except _CUT:
                cursor.reconnects.cut()

    def restart_service(self, name: str) -> ServiceInfo:
        """Restarts the service, waking the box: its running life is stopped and another
        started at once. Answers the service just after."""
        return ServiceInfo.from_json(self._t.send(_api.restart_service(self.id, name)).json())

    def send(self, text: str, *, id: Optional[str] = None) -> Turn:
        """Posts a message to the box's agent (waking the box) and answers its turn: iterate
        it for the events until its `result`. `id` is an idempotency key: the same key
        again answers the same message, whose turn is found again even once answered."""
        posted = self._t.send(_api.post_message(self.id, text, id)).json()
        return Turn(self, posted["id"], posted["seq"], _api.turn_start(posted))

    def events(self, *, after: int = 0) -> Iterator[Event]:
        """The box's events after seq `after`, stored ones first, then live as they come,
        for as long as the loop reads (a cut stream is resumed after the last one seen).
        Watching does not keep the box awake."""
        return follow(self, after)

    def event_page(self, *, after: int = 0) -> EventPage:
        """One page of stored events after seq `after`, without waiting for new ones."""
        return EventPage.from_json(self._t.send(_api.event_page(self.id, after)).json())

    def last_event_seq(self) -> int:
        """The seq of the newest stored event (0 for none), read page by page."""
        after = 0
        while True:
            page = self.event_page(after=after)
            after = page.next_after
            if not page.more:
                return after

    def messages(self, *, after: int = 0, limit: Optional[int] = None) -> List[Message]:
        """The messages posted to the box's agent after queue seq `after` (at most
        `limit`: 100 by default, 1000 at most), queued or delivered."""
        answer = self._t.send(_api.list_messages(self.id, after, limit)).json()
        return [Message.from_json(m) for m in answer["messages"]]

    def egress_audit(self, *, after: int = 0, limit: Optional[int] = None) -> EgressPage:
        """A page of the egress gateway's decisions about the box's outbound connections,
        oldest first, after record `after` (`limit`: 100 by default, 1 to 1000)."""
        return EgressPage.from_json(self._t.send(_api.egress_audit(self.id, after, limit)).json())

    def fetch(
        self,
        port: int,
        path: str = "/",
        *,
        method: str = "GET",
        params: Optional[Mapping[str, str]] = None,
        headers: Optional[Mapping[str, str]] = None,
        content: Any = None,
    ) -> httpx.Response:
        """One HTTP request to the app on the box's `port` at its `path`, through berth
        (waking the box, and waiting a while for the app to listen): the app's answer,
        whatever its status, read whole. berth's own refusals come as answers too (`503`:
        nothing listened)."""
        request = _api.port_request(self.id, port, path, method, params, headers, content)
        return self._t.answer(request)

    def port_url(self, port: int) -> PortUrls:
        """Where the box's `port` is reached through berth (does not wake the box)."""
        return PortUrls.from_json(self._t.send(_api.port_urls(self.id, port)).json())

    def share(self, port: int, *, ttl_s: int = 3600) -> ShareLink:
        """A share link to `port` for someone without a key, live for `ttl_s` seconds;
        its `url` (with the token) is only in this answer."""
        return ShareLink.from_json(self._t.send(_api.share_port(self.id, port, ttl_s)).json())

    def links(self, port: Optional[int] = None) -> List[ShareLink]:
        """The box's share links (of `port`, when given), without their URLs."""
        answer = self._t.send(_api.list_links(self.id, port)).json()
        return [ShareLink.from_json(link) for link in answer["links"]]

    def revoke(self, link_id: str, *, port: Optional[int] = None) -> ShareLink:
        """Ends a share link and every cookie it opened, at once (with `port`: only a link
        of that port, else `NotFound`)."""
        answer = self._t.send(_api.revoke_link(self.id, link_id, port))
        return ShareLink.from_json(answer.json())

    def terminal(
        self,
        cols: int = 80,
        rows: int = 24,
        *,
        cmd: Optional[_api.Command] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        attach: Optional[Terminal] = None,
    ) -> Terminal:
        """A new terminal running `cmd` (default: the user's login shell), waking the box;
        or, with `attach`, that terminal again from where its reading stopped (nothing lost
        or repeated: within its grace, its output is kept)."""
        again = (attach.id, attach.offset) if attach is not None else None
        params = pty_params(cmd, cols, rows, user, cwd, env, again)
        return open_terminal(self._t.target, self.id, params)
