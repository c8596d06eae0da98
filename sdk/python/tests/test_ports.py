"""A box's port through berth, and share links to it."""

import os

import httpx

from conftest import wait_until


def test_a_port_is_reached_with_the_key_or_a_share_link(client, box):
    box.files.mkdir("/tmp/site")
    box.files.write("/tmp/site/index.html", "hi from the box\n")
    box.spawn("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1")
    urls = box.port_url(8000)
    assert urls.port == 8000 and urls.url.endswith("/ports/8000/")

    wait_until(lambda: box.fetch(8000).status_code == 200, "the box's server answers")
    page = box.fetch(8000, "/index.html", params={"v": "1"})
    assert page.text == "hi from the box\n" and page.headers["content-type"] == "text/html"
    assert box.fetch(8000, "no such page").status_code == 404  # the app's own answer
    keyed = httpx.Client(headers={"Authorization": f"Bearer {os.environ['BERTH_API_KEY']}"})
    with keyed:
        assert keyed.get(urls.url + "index.html").text == "hi from the box\n"

    link = box.share(8000, ttl_s=600)
    assert link.state == "live" and link.url and "berth_link=" in link.url
    with httpx.Client(follow_redirects=True) as browser:
        assert browser.get(link.url).text == "hi from the box\n"  # the index
        assert browser.get(urls.url + "index.html").text == "hi from the box\n"
        assert [l.id for l in box.links(8000)] == [link.id]
        assert box.revoke(link.id).state == "revoked"
        assert browser.get(urls.url + "index.html").status_code in (401, 403)
