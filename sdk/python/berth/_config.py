"""Where the daemon is and which key to use, found as the `berth` CLI finds them: the
arguments, else `BERTH_URL` and `BERTH_API_KEY`, else the files `berth up` writes into its
data dir (`berth.url`, `admin.key`; `BERTH_DATA_DIR`, else `/var/lib/berth` as root,
`$XDG_DATA_HOME/berth`, `~/.local/share/berth`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .errors import BerthError

URL_ENV = "BERTH_URL"
API_KEY_ENV = "BERTH_API_KEY"
DATA_DIR_ENV = "BERTH_DATA_DIR"


@dataclass(frozen=True)
class Target:
    """The daemon's base URL, the API key, and what verifies its TLS certificate: the
    local daemon's own `berth.cert` when the URL came from its data dir, else the system's
    trust store (`True`)."""

    url: str
    api_key: str
    verify: Union[bool, str]


def default_data_dir() -> Path:
    """The data dir `berth up` uses by default for this user."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/berth")
    xdg = os.environ.get("XDG_DATA_HOME")
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "berth"
    home = os.environ.get("HOME")
    return Path(home) / ".local/share/berth" if home else Path(".berth")


def resolve(
    url: Optional[str], api_key: Optional[str], data_dir: Optional[Union[str, Path]]
) -> Target:
    """The target from the arguments, the environment and the data dir, in that order."""
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    verify: Union[bool, str] = True
    url = url or os.environ.get(URL_ENV)
    if not url:
        url = _read(directory / "berth.url", f"no daemon address: {URL_ENV} is not set")
        cert = directory / "berth.cert"
        if url.startswith("https://") and cert.is_file():
            verify = str(cert)
    api_key = api_key or os.environ.get(API_KEY_ENV)
    if not api_key:
        api_key = _read(directory / "admin.key", f"no API key: {API_KEY_ENV} is not set")
    return Target(url=url.rstrip("/"), api_key=api_key, verify=verify)


def _read(path: Path, missing: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise BerthError(
            f"{missing} and {path} cannot be read ({e.strerror}); run `berth up` or pass it"
        ) from None
