"""Drives berth's MCP server with the official MCP Python SDK (pinned, unmodified): the same
session over stdio (`berth mcp`, spawned by the SDK) and over Streamable HTTP (the daemon's
`/mcp`, with the tenant's key as a bearer token). Prints `ok <check>` per check that passed;
crates/cli/tests/mcp.rs asserts the list.

Environment: BERTH_BIN (the `berth` binary), BERTH_URL and BERTH_API_KEY (a tenant's key),
OTHER_BOX (a box of another tenant, which this key must not reach).
"""

import asyncio
import os

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TOOLS = [
    "box_create",
    "box_events",
    "box_exec",
    "box_list",
    "box_list_files",
    "box_port_url",
    "box_read_file",
    "box_send_message",
    "box_write_file",
    "memory_read",
    "memory_search",
]

URL = os.environ["BERTH_URL"]
KEY = os.environ["BERTH_API_KEY"]
OTHER_BOX = os.environ["OTHER_BOX"]


def ok(check):
    print(f"ok {check}", flush=True)


def text(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


async def call(client, tool, args):
    """A tool call that must succeed; answers its text."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool} {args} failed: {text(result)}"
    return text(result)


async def refused(client, tool, args):
    """A tool call that must fail as a tool error (not a protocol error); answers its text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} {args} should have failed: {text(result)}"
    return text(result)


async def session(client, via, box):
    tools = await client.list_tools()
    assert sorted(t.name for t in tools.tools) == TOOLS, [t.name for t in tools.tools]
    exec_schema = next(t for t in tools.tools if t.name == "box_exec").input_schema
    assert exec_schema["required"] == ["box", "command"], exec_schema
    ok(f"{via}: tools listed with their schemas")

    created = await call(client, "box_create", {"name": box, "template": "echo"})
    assert f'"name":"{box}"' in created and '"state":"stopped"' in created, created
    listed = await call(client, "box_list", {})
    assert f'"name":"{box}"' in listed and OTHER_BOX not in listed, listed
    ok(f"{via}: box created and listed")

    ran = await call(
        client, "box_exec", {"box": box, "command": "echo hi; echo oops >&2; exit 3"}
    )
    assert ran.startswith("exit_code: 3"), ran
    assert "--- stdout (3 bytes) ---\nhi" in ran and "--- stderr (5 bytes) ---\noops" in ran, ran
    long = await call(client, "box_exec", {"box": box, "command": "seq 1 200000"})
    assert "bytes left out" in long and long.rstrip().endswith("box_read_file (offset) or `sed -n`/`grep`]"), long[-400:]
    assert len(long) < 20_000 and "\n200000\n" in long, len(long)
    ok(f"{via}: exec answers the exit code and output, cut to size")

    content = "héllo from mcp\n" * 3
    wrote = await call(
        client, "box_write_file", {"box": box, "path": "/home/user/notes.txt", "content": content}
    )
    assert wrote == f"wrote {len(content.encode())} bytes to /home/user/notes.txt", wrote
    read = await call(client, "box_read_file", {"box": box, "path": "/home/user/notes.txt"})
    assert read == f"/home/user/notes.txt: {len(content.encode())} bytes, all shown\n{content}", read
    part = await call(
        client,
        "box_read_file",
        {"box": box, "path": "/home/user/notes.txt", "offset": 1, "max_bytes": 5},
    )
    assert part.startswith("/home/user/notes.txt: bytes 1..6 of 48;"), part
    assert part.endswith("call again with offset=6\néllo"), part
    files = await call(client, "box_list_files", {"box": box})
    assert "notes.txt" in files, files
    ok(f"{via}: a file written, read whole and in part, listed")

    answer = await call(client, "box_send_message", {"box": box, "content": "hello there"})
    assert answer == "echo: hello there", answer
    events = await call(client, "box_events", {"box": box})
    assert " result " in events and "echo: hello there" in events, events
    ok(f"{via}: the agent answered the message, and its events read back")

    # The echo harness notes each turn in /memory/timeline/<day>.md.
    memory = await call(client, "memory_read", {"box": box})
    assert memory.startswith("/memory: ") and "  timeline/" in memory, memory
    days = [
        line.split()[-1]
        for line in memory.splitlines()
        if line.split()[-1].startswith("timeline/") and line.endswith(".md") and "README" not in line
    ]
    assert len(days) == 1, memory
    note = await call(client, "memory_read", {"box": box, "path": days[0]})
    assert note.startswith(f"/memory/{days[0]}:\n") and "- user: hello there" in note, note
    folder = await call(client, "memory_read", {"box": box, "path": "timeline"})
    assert folder.startswith("/memory/timeline: ") and days[0] in folder, folder
    readme = await call(client, "memory_read", {"box": box, "path": "/memory/README.md"})
    assert "Persistent memory of [[user]]" in readme, readme
    missing = await refused(client, "memory_read", {"box": box, "path": "nope.md"})
    assert "404 not_found" in missing, missing
    ok(f"{via}: the agent's memory listed and read")

    found = await call(client, "memory_search", {"box": box, "query": "hello"})
    assert found.startswith('/memory: 1 file matches "hello" (of '), found
    assert f"\n{days[0]}\n  " in found and "- user: hello there" in found, found
    assert found.endswith("[read a whole file with memory_read]"), found
    lines = await call(client, "memory_search", {"box": box, "query": "README", "limit": 1})
    assert lines.startswith("/memory: 1 file matches"), lines
    none = await call(client, "memory_search", {"box": box, "query": "zanzibar"})
    assert none.startswith('/memory: no file matches "zanzibar"'), none
    empty = await refused(client, "memory_search", {"box": box, "query": "  "})
    assert empty == "invalid argument query: has no words to find", empty
    too_many = await refused(client, "memory_search", {"box": box, "query": "a", "limit": 0})
    assert too_many == "invalid argument limit: must be 1 to 100", too_many
    theirs = await refused(client, "memory_search", {"box": OTHER_BOX, "query": "hello"})
    assert "404 not_found" in theirs, theirs
    ok(f"{via}: the agent's memory searched")

    url = await call(client, "box_port_url", {"box": box, "port": 8080})
    assert url.startswith(f"{URL}/v1/boxes/{box}/ports/8080/"), url
    ok(f"{via}: a port's URL")

    theirs = await refused(client, "box_exec", {"box": OTHER_BOX, "command": "true"})
    assert f'no box "{OTHER_BOX}"' in theirs and "404 not_found" in theirs, theirs
    theirs = await refused(client, "box_read_file", {"box": OTHER_BOX, "path": "/etc/hostname"})
    assert "404 not_found" in theirs, theirs
    bad = await refused(client, "box_exec", {"box": box})
    assert bad == "invalid arguments for box_exec: missing field `command`", bad
    ok(f"{via}: another tenant's box and bad arguments are tool errors")


async def main():
    stdio = StdioServerParameters(
        command=os.environ["BERTH_BIN"],
        args=["mcp"],
        env={"BERTH_URL": URL, "BERTH_API_KEY": KEY},
    )
    async with Client(stdio) as client:
        await session(client, "stdio", "mcp-stdio")

    headers = {"Authorization": f"Bearer {KEY}"}
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(f"{URL}/mcp", http_client=http)) as client:
            await session(client, "http", "mcp-http")
        # A client on the older handshake (initialize) gets the same tools.
        transport = streamable_http_client(f"{URL}/mcp", http_client=http)
        async with Client(transport, mode="legacy") as client:
            listed = await call(client, "box_list", {})
            assert '"name":"mcp-http"' in listed, listed
        ok("http: the initialize handshake works too")

    # No key, or a wrong one: the endpoint itself refuses, as the API does.
    async with httpx2.AsyncClient(timeout=timeout) as anonymous:
        for auth in [None, "Bearer berth_wrong"]:
            headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
            if auth:
                headers["Authorization"] = auth
            answer = await anonymous.post(f"{URL}/mcp", headers=headers, content=b"{}")
            assert answer.status_code == 401, (answer.status_code, answer.text)
            assert answer.json()["error"]["code"] == "unauthorized", answer.text
        # A body past the endpoint's 2 MiB is refused, not buffered.
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        answer = await anonymous.post(f"{URL}/mcp", headers=headers, content=b" " * (3 << 20))
        assert answer.status_code == 413, (answer.status_code, answer.text[:200])
    ok("http: no key or a wrong key is 401, an oversized body 413")


asyncio.run(main())
