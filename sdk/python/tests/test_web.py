"""Web sign-ins seen from a key: a pairing link traded for a session by a browser (here,
a plain HTTP client without a key), the session listed, then revoked."""

import httpx
import pytest

from berth import InvalidRequest, NotFound


def test_a_pairing_signs_a_browser_in_and_its_session_is_revoked(client):
    pairing = client.web.pair(ttl_s=60)
    assert pairing.code.startswith("bwp_") and pairing.url.endswith("#/pair/" + pairing.code)
    with pytest.raises(InvalidRequest):
        client.web.pair(ttl_s=5)

    with httpx.Client(base_url=client.url) as browser:
        signed_in = browser.post("/v1/web/sessions",
                                 json={"pairing_code": pairing.code, "device": "sdk test"})
        assert signed_in.status_code == 201, signed_in.text
        session_id = signed_in.json()["id"]
        try:
            # The cookie is `Secure`: a cookie jar keeps it from plain http; it goes by hand.
            cookie = signed_in.headers["set-cookie"].split(";")[0]
            assert cookie.startswith("__Host-berth_session=")
            browser.headers["Cookie"] = cookie
            assert browser.get("/v1/web/session").status_code == 200
            session = next(s for s in client.web.sessions() if s.id == session_id)
            assert session.device == "sdk test" and session.opened_with == "pairing"
        finally:
            client.web.revoke(session_id)
        assert browser.get("/v1/web/session").status_code == 401
    assert session_id not in [s.id for s in client.web.sessions()]
    with pytest.raises(NotFound):
        client.web.revoke(session_id)
