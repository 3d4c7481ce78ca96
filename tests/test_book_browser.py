"""The built book in a real browser: every page opens in headless Chromium without errors, every image
loads, the scoreboard table is there; screenshots of the landing page and one notebook page are saved.

Needs `make book` first (`make test` runs it before this file) and Debian's chromium.
"""

import functools
import http.server
import json
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

HTML = Path(__file__).resolve().parent.parent / "_build" / "html"
SHOTS = HTML.parent / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Pages Sphinx generates around the content; they have no figures of ours.
SKIP = {"genindex.html", "search.html"}
# The one resource the theme loads from the internet: MathJax, for the formulas. The test machines are
# offline, so its load fails here while it works for any online reader; every other failure counts.
# Errors that are not the page's: MathJax's CDN is unreachable offline, and Chromium itself asks the
# server root for /favicon.ico when a page names no icon (the root index.html is a bare redirect).
OFFLINE_OK = ("net::ERR_NAME_NOT_RESOLVED https://cdn.jsdelivr.net/npm/mathjax@3/", "/favicon.ico")


class Page:
    """A minimal Chrome DevTools Protocol client for one tab."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def open(self, url: str) -> list[str]:
        """Navigate, wait for the load event and a settle, return the page's errors."""
        self.evaluate("window.__previous_page = true")  # gone once the new document has replaced this one
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.time() + 60
        while not self._settled():
            if time.time() > deadline:
                raise AssertionError(f"{url} did not finish loading within 60 s")
            time.sleep(0.05)
        time.sleep(0.3)  # let late console messages and image decodes arrive
        self.call("Runtime.evaluate", expression="1")  # drains events that arrived meanwhile
        errors = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                errors.append(e["params"]["exceptionDetails"].get("text", "exception"))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                text = e["params"]["entry"]["text"] + " " + e["params"]["entry"].get("url", "")
                if not any(ok in text for ok in OFFLINE_OK):
                    errors.append(text)
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                errors.append(" ".join(str(a.get("value", "")) for a in e["params"]["args"]))
        return errors

    def _settled(self) -> bool:
        """The new document has loaded and will not navigate on: a meta-refresh redirect (the root
        index.html) counts as still on its way. Asking while a navigation swaps documents is answered
        with an error; that too means not yet."""
        try:
            return self.evaluate("!window.__previous_page && document.readyState === 'complete'"
                                 " && !document.querySelector('meta[http-equiv=\"Refresh\" i]')")
        except RuntimeError as err:
            if "navigated" in str(err) or "context" in str(err):
                return False
            raise

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


@pytest.fixture(scope="module")
def site():
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make book` first (make test does)")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def page():
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs Debian's chromium")
    profile = tempfile.mkdtemp(prefix="fedbook-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,900", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-allow-origins=*", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.time() + 60
    while not port_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    port = port_file.read_text().split()[0]
    import urllib.request

    targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
    tab = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
    yield tab
    tab.ws.close()
    proc.terminate()
    proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


def _pages() -> list[str]:
    return sorted(str(p.relative_to(HTML)) for p in HTML.rglob("*.html")
                  if p.name not in SKIP and "_static" not in p.parts and "_sources" not in p.parts)


def test_every_page_loads_without_errors_and_all_images_render(site, page):
    pages = _pages()
    assert "index.html" in pages and any(p.startswith("notebooks/") for p in pages)
    problems = {}
    for rel in pages:
        errors = page.open(f"{site}/{rel}")
        broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                               ".map(i => i.src)")
        if errors or broken:
            problems[rel] = {"errors": errors, "broken images": broken}
    assert not problems, problems


def test_notebook_pages_show_figures(site, page):
    for rel in ("notebooks/01_mcmahan_fedavg.html", "notebooks/03_fednnnn.html"):
        page.open(f"{site}/{rel}")
        assert page.evaluate("document.images.length") >= 1, rel


def test_scoreboard_table_is_present(site, page):
    page.open(f"{site}/book/scoreboard.html")
    assert page.evaluate("document.querySelectorAll('table').length") >= 2
    text = page.evaluate("document.body.innerText")
    assert "paper" in text and "ours" in text and "status" in text


def test_screenshots_of_landing_and_notebook_page(site, page):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for rel, name in (("index.html", "landing.png"), ("notebooks/03_fednnnn.html", "fednnnn.png")):
        page.open(f"{site}/{rel}")
        page.screenshot(SHOTS / name)
        assert (SHOTS / name).stat().st_size > 10_000
