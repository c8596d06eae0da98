"""The asyncio client: `AsyncBerth`, the same surface as `Berth` with coroutines, and
async iterators where the blocking client has iterators. Both clients build their calls
and read their answers with `_api` (no I/O), so only the sending differs.

    from berth.aio import AsyncBerth

    async with AsyncBerth() as client:
        box = await client.boxes.create("alice")
        print((await box.exec("echo hi")).stdout)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator, Dict, Iterable, List, Mapping, Optional, Union

import httpx

from . import _api, _local
from ._aio_files import AsyncFiles
from ._aio_terminal import AsyncTerminal
from ._async import AsyncTransport
from ._config import resolve
from ._views import BoxView, ProcessView, TurnView
from ._websocket import connect_async
from .daemon import AsyncTemplates, Health, Runtime, runtimes_from
from .desktop import AsyncDesktop
from .memory import AsyncMemory
from .models import (
    BoxInfo,
    EgressPage,
    Event,
    EventPage,
    ExecResult,
    Message,
    OutputChunk,
    PortUrls,
    ProcessExit,
    ProcessInfo,
    ServiceInfo,
    ShareLink,
)
from .models_backup import BackupFile, RestoredBackup
from .secrets import AsyncSecrets
from .tenants import AsyncTenants
from .terminal import pty_params
from .vnc import AsyncVncConnection
from .wakeups import AsyncWakeups
from .web import AsyncWeb
from .webhooks import AsyncWebhooks

__all__ = ["AsyncBerth", "AsyncBox", "AsyncBoxes", "AsyncFiles", "AsyncProcess",
           "AsyncMemory", "AsyncTerminal", "AsyncTurn", "AsyncVncConnection"]

# A cut stream: the daemon restarting, or a proxy dropping an idle connection.
_CUT = (httpx.ReadError, httpx.RemoteProtocolError)


class AsyncBerth:
    """A client of one berth daemon for asyncio programs; found as `Berth` finds it."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        data_dir: Optional[Union[str, Path]] = None,
        timeout: float = 60.0,
        http: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._transport = AsyncTransport(resolve(url, api_key, data_dir), timeout, http)
        self.boxes = AsyncBoxes(self._transport)
        self.tenants = AsyncTenants(self._transport)
        self.secrets = AsyncSecrets(self._transport)
        self.templates = AsyncTemplates(self._transport)
        self.webhooks = AsyncWebhooks(self._transport)
        self.web = AsyncWeb(self._transport)

    @property
    def url(self) -> str:
        return self._transport.target.url

    async def health(self) -> Health:
        return Health.from_json((await self._transport.send(_api.health())).json())

    async def runtimes(self) -> List[Runtime]:
        return runtimes_from((await self._transport.send(_api.runtimes())).json())

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncBerth":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncBoxes:
    """The tenant's boxes."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(
        self,
        name: str,
        *,
        template: Optional[str] = None,
        runtime: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        labels: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        **more: Any,
    ) -> "AsyncBox":
        fields = dict(template=template, runtime=runtime, limits=limits, labels=labels,
                      env=env, **more)
        return self._box((await self._t.send(_api.create_box(name, fields))).json())

    async def list(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None
    ) -> List["AsyncBox"]:
        answer = (await self._t.send(_api.list_boxes(labels, state))).json()
        return [self._box(b) for b in answer["boxes"]]

    async def get(self, ref: str) -> "AsyncBox":
        return self._box((await self._t.send(_api.get_box(ref))).json())

    async def delete(self, ref: str) -> None:
        await self._t.send(_api.delete_box(ref))

    async def restore(
        self,
        source: Any,
        *,
        name: Optional[str] = None,
        tenant: Optional[str] = None,
        runtime: Optional[str] = None,
        template: Optional[str] = None,
    ) -> RestoredBackup["AsyncBox"]:
        """A new box of a backup, as `Boxes.restore`: a file is read on a worker thread as
        it is sent; `source` may also be an async iterable of chunks."""
        to = dict(name=name, tenant=tenant, runtime=runtime, template=template)
        with _local.upload(source) as (body, size):
            answer = (await self._t.send(_api.restore_backup(body, size, to))).json()
        return RestoredBackup.from_json(answer, self._box(answer["box"]))

    def _box(self, data: Dict[str, Any]) -> "AsyncBox":
        return AsyncBox(self._t, BoxInfo.from_json(data))


class AsyncBox(BoxView):
    """One box, as `Box` (docs/sdk-python.md has each call)."""

    def __init__(self, transport: AsyncTransport, info: BoxInfo) -> None:
        self._t = transport
        self.info = info
        self.files = AsyncFiles(transport, info.id)
        self.memory = AsyncMemory(transport, info.id)
        self.wakeups = AsyncWakeups(transport, info.id)
        self.desktop = AsyncDesktop(transport, info.id)

    async def _set(self, request: _api.Request) -> "AsyncBox":
        self.info = BoxInfo.from_json((await self._t.send(request)).json())
        return self

    async def refresh(self) -> "AsyncBox":
        return await self._set(_api.get_box(self.id))

    async def start(self, *, runtime: Optional[str] = None) -> "AsyncBox":
        body = {"runtime": runtime} if runtime else None
        return await self._set(_api.box_verb(self.id, "start", body))

    async def stop(self) -> "AsyncBox":
        return await self._set(_api.box_verb(self.id, "stop"))

    async def pause(self) -> "AsyncBox":
        return await self._set(_api.box_verb(self.id, "pause"))

    async def resume(self) -> "AsyncBox":
        return await self._set(_api.box_verb(self.id, "resume"))

    async def snapshot(self) -> "AsyncBox":
        return await self._set(_api.box_verb(self.id, "snapshot"))

    async def update(self, **fields: Any) -> "AsyncBox":
        return await self._set(_api.update_box(self.id, fields))

    async def delete(self) -> None:
        await self._t.send(_api.delete_box(self.id))

    async def backup(self, path: _local.LocalPath) -> BackupFile:
        """The box's backup into the local file (or directory) `path`, as `Box.backup`;
        the file is written, synced and renamed on worker threads."""
        download = await asyncio.to_thread(_local.Download, path, f"{self.name}.tar.zst")
        try:
            async with self._t.stream(_api.backup_box(self.id)) as response:
                try:
                    async for chunk in response.aiter_bytes():
                        await asyncio.to_thread(download.write, chunk)
                except _CUT as e:
                    raise _api.cut("the backup") from e
                given = _api.backup_file_name(response.headers.get("content-disposition"))
                return await asyncio.to_thread(download.finish, given)
        finally:
            download.abort()

    async def backup_stream(self) -> AsyncIterator[bytes]:
        """The box's backup as it comes, as `Box.backup_stream`."""
        async with self._t.stream(_api.backup_box(self.id)) as response:
            try:
                async for chunk in response.aiter_bytes():
                    yield chunk
            except _CUT as e:
                raise _api.cut("the backup") from e

    async def exec(
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
        """Runs `cmd` to its end; with `on_stdout`/`on_stderr` (plain functions) the output
        is streamed to them as it comes."""
        body = _api.exec_body(cmd, cwd=cwd, env=env, user=user, stdin=stdin, timeout=timeout)
        if on_stdout is None and on_stderr is None:
            answer = await self._t.send(_api.exec_request(self.id, body, stream=False))
            return ExecResult.from_json(answer.json())
        collector = _api.ExecCollector(on_stdout, on_stderr)
        async with self._t.stream(_api.exec_request(self.id, body, stream=True)) as response:
            async for line in response.aiter_lines():
                collector.feed(line)
                if collector.result is not None:
                    return collector.result
        raise _api.cut("the exec stream")

    async def spawn(
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
    ) -> "AsyncProcess":
        body = _api.exec_body(cmd, cwd=cwd, env=env, user=user, stdin=stdin, timeout=timeout)
        body = _api.spawn_body(body, open_stdin=open_stdin, keep_awake=keep_awake)
        answer = await self._t.send(_api.exec_request(self.id, body, stream=False))
        return AsyncProcess(self._t, self.id, ProcessInfo.from_json(answer.json()))

    async def processes(self) -> List["AsyncProcess"]:
        answer = (await self._t.send(_api.list_processes(self.id))).json()
        return [AsyncProcess(self._t, self.id, ProcessInfo.from_json(p))
                for p in answer["processes"]]

    async def services(self) -> List[ServiceInfo]:
        answer = (await self._t.send(_api.list_services(self.id))).json()
        return [ServiceInfo.from_json(s) for s in answer["services"]]

    async def service_logs(
        self, name: str, offset: int = 0, follow: bool = False
    ) -> AsyncIterator[OutputChunk]:
        """The service's log from `offset`, as `Box.service_logs`."""
        cursor = _api.OutputCursor(offset, "the service's log stream")
        while True:
            request = _api.service_logs(self.id, name, cursor.offset, follow)
            try:
                async with self._t.stream(request) as response:
                    async for line in response.aiter_lines():
                        chunk = cursor.feed(line)
                        if chunk is not None:
                            yield chunk
                return
            except _CUT:
                cursor.reconnects.cut()

    async def restart_service(self, name: str) -> ServiceInfo:
        answer = await self._t.send(_api.restart_service(self.id, name))
        return ServiceInfo.from_json(answer.json())

    async def send(self, text: str, *, id: Optional[str] = None) -> "AsyncTurn":
        posted = (await self._t.send(_api.post_message(self.id, text, id))).json()
        return AsyncTurn(self, posted["id"], posted["seq"], _api.turn_start(posted))

    async def events(self, *, after: int = 0) -> AsyncIterator[Event]:
        """The box's events after seq `after`, live, resumed after the last one seen when
        the stream is cut, for as long as the caller reads."""
        reconnects = _api.Reconnects("the event stream")
        while True:
            try:
                async with self._t.stream(_api.event_stream(self.id, after)) as response:
                    parser = _api.SseParser()
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            after = event.seq
                            reconnects.progress()
                            yield event
            except _CUT:
                pass
            reconnects.cut()

    async def event_page(self, *, after: int = 0) -> EventPage:
        return EventPage.from_json((await self._t.send(_api.event_page(self.id, after))).json())

    async def last_event_seq(self) -> int:
        after = 0
        while True:
            page = await self.event_page(after=after)
            after = page.next_after
            if not page.more:
                return after

    async def messages(self, *, after: int = 0, limit: Optional[int] = None) -> List[Message]:
        answer = (await self._t.send(_api.list_messages(self.id, after, limit))).json()
        return [Message.from_json(m) for m in answer["messages"]]

    async def egress_audit(self, *, after: int = 0, limit: Optional[int] = None) -> EgressPage:
        answer = await self._t.send(_api.egress_audit(self.id, after, limit))
        return EgressPage.from_json(answer.json())

    async def fetch(
        self,
        port: int,
        path: str = "/",
        *,
        method: str = "GET",
        params: Optional[Mapping[str, str]] = None,
        headers: Optional[Mapping[str, str]] = None,
        content: Any = None,
    ) -> httpx.Response:
        """The app's answer on `port`, read whole, whatever its status."""
        request = _api.port_request(self.id, port, path, method, params, headers, content)
        return await self._t.answer(request)

    async def port_url(self, port: int) -> PortUrls:
        return PortUrls.from_json((await self._t.send(_api.port_urls(self.id, port))).json())

    async def share(self, port: int, *, ttl_s: int = 3600) -> ShareLink:
        answer = await self._t.send(_api.share_port(self.id, port, ttl_s))
        return ShareLink.from_json(answer.json())

    async def links(self, port: Optional[int] = None) -> List[ShareLink]:
        answer = (await self._t.send(_api.list_links(self.id, port))).json()
        return [ShareLink.from_json(link) for link in answer["links"]]

    async def revoke(self, link_id: str, *, port: Optional[int] = None) -> ShareLink:
        answer = await self._t.send(_api.revoke_link(self.id, link_id, port))
        return ShareLink.from_json(answer.json())

    async def terminal(
        self,
        cols: int = 80,
        rows: int = 24,
        *,
        cmd: Optional[_api.Command] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        attach: Optional["AsyncTerminal"] = None,
    ) -> "AsyncTerminal":
        again = (attach.id, attach.offset) if attach is not None else None
        params = pty_params(cmd, cols, rows, user, cwd, env, again)
        connection = await connect_async(self._t.target, _api.box_path(self.id, "pty"), params)
        terminal = AsyncTerminal(connection)
        await terminal._hello()
        return terminal


class AsyncProcess(ProcessView):
    """A background process, as `Process`; `output()` is an async iterator."""

    def __init__(self, transport: AsyncTransport, box_id: str, info: ProcessInfo) -> None:
        self._t = transport
        self._box = box_id
        self.info = info
        self.offset = 0
        self.exit: Optional[ProcessExit] = info.exit

    async def output(self, offset: Optional[int] = None) -> AsyncIterator[OutputChunk]:
        cursor = _api.OutputCursor(self.offset if offset is None else offset)
        while cursor.exit is None:
            request = _api.process_output(self._box, self.id, cursor.offset)
            try:
                async with self._t.stream(request) as response:
                    async for line in response.aiter_lines():
                        chunk = cursor.feed(line)
                        if chunk is not None:
                            self.offset = cursor.offset
                            yield chunk
            except _CUT:
                pass
            if cursor.exit is None:
                cursor.reconnects.cut()
        self.exit = cursor.exit

    async def wait(self) -> ProcessExit:
        async for _ in self.output():
            pass
        assert self.exit is not None
        return self.exit

    async def write_stdin(
        self, data: Union[str, bytes, Iterable[bytes]], *, close: bool = False
    ) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        await self._t.send(_api.process_stdin(self._box, self.id, data, close))

    async def close_stdin(self) -> None:
        await self._t.send(_api.process_stdin(self._box, self.id, b"", True))

    async def signal(self, signal: str) -> None:
        await self._t.send(_api.process_signal(self._box, self.id, signal))

    async def kill(self) -> None:
        await self.signal("KILL")


class AsyncTurn(TurnView):
    """The answer to one message, as `Turn`: `async for` its events up to its `result`."""

    def __init__(self, box: AsyncBox, message_id: str, seq: int, after: int) -> None:
        self._box = box
        self.message_id = message_id
        self.seq = seq
        self.events_after = after
        self._after = after
        self.result: Optional[Event] = None

    async def __aiter__(self) -> AsyncIterator[Event]:
        if self.result is not None:
            return
        turn = _api.TurnFilter(self.message_id)
        events = self._box.events(after=self._after)
        try:
            async for event in events:
                self._after = event.seq
                turn.take(event)
                yield event
                if turn.done:
                    self.result = event
                    return
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def wait(self) -> Event:
        async for _ in self:
            pass
        assert self.result is not None
        return self.result
