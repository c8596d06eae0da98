"""README.md's Python example ("From code: the SDKs") runs as written against the daemon,
and prints what its comments say."""

import contextlib
import io
import pathlib
import re

from berth import Berth, NotFound

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"
BOX = "quickstart-py"


def readme_blocks(lang: str):
    section = README.read_text().split("### From code: the SDKs", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_the_readme_example_runs_as_written(client: Berth):
    [code] = readme_blocks("python")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        # A failed run leaves no box behind.
        try:
            client.boxes.delete(BOX)
        except NotFound:
            pass
    out = printed.getvalue()
    assert "55\n" in out, out
    assert "remember 42" in out, out
    assert re.search(r"fetch\s+compile\s+test\s+exit 0", out), out
