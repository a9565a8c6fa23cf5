"""`nvtx-tf watch --web` (issue 47, criterion 5: the web page <= 50 KB/s): what one open page
receives while it follows a live job, at a few sizes of job.

For each RANKS (4, 16, 32 by default): RANKS ranks x 10 steps/s x 200 ranges a step under
``nvtx-tf record``, running until SECONDS s after the page showed them all, watched by
``watch --web 127.0.0.1:0 --interval 0.5`` from before they start, the page open in headless
Chromium (tests/test_viewer.py's ``Browser``, over the DevTools Protocol). Counted from the
DevTools' network events: the bytes of the page's first load (HTML, Bokeh's JavaScript and CSS:
once per tab) and then the websocket frames it receives (Bokeh's document patches: the page's
stream) over those SECONDS s; and ``watch``'s CPU over them (/proc/PID/stat, % of one core)
with the page open.

python benchmarks/bench_watch_web.py [--ranks 4 16 32] [--seconds 20]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PACED = """
import os, sys, time, nvtx
stop = sys.argv[1]
end = time.monotonic() + 600
i = 0
while time.monotonic() < end and not (i % 10 == 0 and os.path.exists(stop)):
    with nvtx.annotate(f"step {i}", domain="bench"):
        for k in range(200):
            nvtx.push_range(f"r{k % 20}", domain="bench")
            nvtx.pop_range(domain="bench")
        time.sleep(0.095)
    i += 1
"""


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _frame_bytes(params: dict) -> int:
    payload = params["response"]["payloadData"]
    if params["response"]["opcode"] == 2:  # (binary: base64 in the event)
        return len(base64.b64decode(payload))
    return len(payload.encode())


def page_rate(tmp: Path, ranks: int, seconds: float) -> dict:
    """One job of ``ranks`` ranks watched with the page open; the page's bytes."""
    from test_viewer import Browser, _chromium

    folder = tmp / f"job{ranks}"
    folder.mkdir()
    script = tmp / "paced.py"
    script.write_text(PACED)
    watch = subprocess.Popen(_cli("watch", folder, "--web", "127.0.0.1:0", "--interval", "0.5"),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    url = watch.stdout.readline().split()[-1]
    browser = Browser(_chromium(), tmp / f"profile{ranks}", tmp / f"chromium{ranks}.log")
    procs = []
    try:
        browser.call("Network.enable")
        browser.call("Page.enable")
        loaded = {}
        browser.call("Page.navigate", url=url)
        procs = [
            subprocess.Popen(
                _cli("record", "-o", folder / f"rank{r}", "--", sys.executable, script, tmp / "stop"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for r in range(ranks)
        ]
        browser.wait_for(
            f"window.Bokeh && Bokeh.documents.length > 0 && "
            f"Bokeh.documents[0].get_model_by_name('ranks').data.rank.length == {ranks}",
            "every rank on the page",
        )
        # From here, every DevTools event is read by us: the frames the page receives.
        received, frames, begin, cpu = 0, 0, time.monotonic(), _cpu(watch.pid)
        end = begin + seconds
        browser.ws.settimeout(0.5)
        while time.monotonic() < end:
            try:
                message = json.loads(browser.ws.recv())
            except Exception:  # (a timeout: no event in 0.5 s)
                continue
            method = message.get("method")
            if method == "Network.webSocketFrameReceived":
                received += _frame_bytes(message["params"])
                frames += 1
            elif method == "Network.loadingFinished":
                loaded[message["params"]["requestId"]] = message["params"]["encodedDataLength"]
        span, cpu = time.monotonic() - begin, _cpu(watch.pid) - cpu
        shown = browser.evaluate("Bokeh.documents[0].get_model_by_name('ranks').data.step.map(Number)")
    finally:
        browser.close()
        (tmp / "stop").touch()
        for p in procs:
            p.wait()
        (tmp / "stop").unlink()
        _stop(watch)
    return {"bytes": received, "frames": frames, "span": span, "cpu": cpu, "steps_shown": sum(shown)}


def _cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(watch: subprocess.Popen) -> float:
    """SIGINT ``watch``; its CPU seconds (rusage)."""
    watch.send_signal(2)
    _, _, usage = os.wait4(watch.pid, 0)
    return usage.ru_utime + usage.ru_stime


def first_load(tmp: Path) -> int:
    """The bytes of a tab's first load (every HTTP response of the page), from an idle watch."""
    from test_viewer import Browser, _chromium

    folder = tmp / "idle"
    folder.mkdir()
    watch = subprocess.Popen(_cli("watch", folder, "--web", "127.0.0.1:0"), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    url = watch.stdout.readline().split()[-1]
    browser = Browser(_chromium(), tmp / "profile-idle", tmp / "chromium-idle.log")
    try:
        browser.call("Network.enable")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        browser.wait_for("window.Bokeh && Bokeh.documents.length > 0", "the page")
        browser.call("Page.reload", ignoreCache=True)
        total, end = 0, time.monotonic() + 5
        browser.ws.settimeout(0.5)
        while time.monotonic() < end:
            try:
                message = json.loads(browser.ws.recv())
            except Exception:
                continue
            if message.get("method") == "Network.loadingFinished":
                total += message["params"]["encodedDataLength"]
    finally:
        browser.close()
        _stop(watch)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    import shutil

    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("skipped: no Chromium here (apt-get install chromium)")
        return 0
    print(f"load average at the start: {os.getloadavg()[0]:.1f} (2 cores)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"a tab's first load (HTML, Bokeh's JS and CSS, uncompressed): {first_load(tmp) / 1e6:.2f} MB")
        for ranks in args.ranks:
            r = page_rate(tmp, ranks, args.seconds)
            rate = r["bytes"] / r["span"] / 1e3
            print(f"  {ranks:>3} ranks x 10 steps/s x 200 ranges: the page received {r['bytes'] / 1e3:.1f} KB "
                  f"in {r['frames']} websocket frames over {r['span']:.1f} s = {rate:.1f} KB/s; watch's CPU "
                  f"{r['cpu']:.2f} s ({100 * r['cpu'] / r['span']:.0f} % of a core) over them")  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
