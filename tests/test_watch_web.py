"""``nvtx-tf watch --web`` (issue 47) in real headless Chromium, driven over the DevTools
Protocol as tests/test_viewer.py drives the Perfetto UI (its :class:`Browser`): a live job of
4 ranks (sleep-based step loops under ``nvtx-tf record``, running until the test lets them
end; rank 2's "load" 60 ms longer a step, rank 3's work in a range named like HTML) watched
from before its ranks start.

The page shows the 4 ranks and its step numbers grow while the job runs; it names rank2 and
its load range as the straggler; a real mouse click on rank2's cell of a step lists that
step's ranges, their ns those of ``watch --json`` on the finished job; the HTML-like name is
text (no element made of it); nothing is fetched from any other host; SIGINT ends it, 130.

The page's figures are read from the Bokeh document the page holds (``Bokeh.documents``, what
it draws) and from its rendered text (inside the shadow roots Bokeh draws in).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import _child_env
from test_viewer import WAIT, Browser, _chromium, _distinct_colours

pytest.importorskip("bokeh", reason="the 'web' extra")

RANK = """
import os, sys, time, nvtx
rank, stop = int(sys.argv[1]), sys.argv[2]
for i in range(3000):
    if os.path.exists(stop):
        break
    with nvtx.annotate(f"step {i}", domain="train"):
        with nvtx.annotate("load", domain="train"):
            time.sleep(0.030 + (0.060 if rank == 2 else 0.0))
        with nvtx.annotate("compute" if rank != 3 else "<img src=x onerror=window.owned=1>", domain="train"):
            time.sleep(0.090)
"""
HOSTILE = "train:<img src=x onerror=window.owned=1>"

# The text of the page, shadow roots included (Bokeh draws its widgets in them), styles left out.
DEEP_TEXT = """(() => { const out = []; const walk = (n) => { if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) { if (c.nodeType === 3) out.push(c.textContent);
  else if (c.tagName !== 'STYLE' && c.tagName !== 'SCRIPT') walk(c); } };
  walk(document.body); return out.join(' '); })()"""
# The cells the tables draw, in order (SlickGrid's), as 'a|b|...|'.
CELLS = """(() => { const out = []; const walk = (n) => { if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) { if (c.classList && c.classList.contains('slick-cell')) out.push(c.textContent);
  else walk(c); } }; walk(document.body); return '|' + out.join('|') + '|'; })()"""
DEEP_IMAGES = """(() => { let k = 0; const walk = (n) => { if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) { if (c.tagName === 'IMG') k++; walk(c); } }; walk(document.body); return k; })()"""


def _model(name: str) -> str:
    return f"Bokeh.documents[0].get_model_by_name({json.dumps(name)})"


def click_cell(browser, step: int, row: int) -> None:
    """A real mouse click (DevTools' Input events) on the heatmap's cell of ``step`` in ``row``
    (its pixel from the plot's own scales)."""
    x, y = browser.evaluate(
        f"(() => {{ const v = Bokeh.index.find_one({_model('heatmap')}); const r = v.canvas_view.el"
        f".getBoundingClientRect(); return [r.left + v.frame.x_scale.compute({step}),"
        f" r.top + v.frame.y_scale.compute({row})]; }})()"
    )
    for kind in ("mousePressed", "mouseReleased"):
        browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def test_the_page_streams_the_job_and_a_click_shows_a_steps_ranges(tmp_path):
    chromium = _chromium()
    pytest.importorskip("websocket", reason="websocket-client: pip install -e '.[test]'")
    env = _child_env()
    script, stop, folder = tmp_path / "rank.py", tmp_path / "stop", tmp_path / "job"
    script.write_text(RANK)
    folder.mkdir()
    watch = subprocess.Popen(_cli("watch", folder, "--web", "127.0.0.1:0", "--interval", "0.5"), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    ranks, browser = [], None
    try:
        first = watch.stdout.readline()
        assert first.startswith("nvtx-tf watch --web: http://127.0.0.1:"), (first, watch.stderr.read())
        url = first.split()[-1]
        assert watch.stdout.readline().startswith("from another machine: ssh -L ")
        for rank in range(4):
            argv = _cli("record", "-o", folder / f"rank{rank}", "--", sys.executable, script, rank, stop)
            ranks.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        browser = Browser(chromium, tmp_path / "profile", tmp_path / "chromium.log")
        browser.call("Network.enable")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        table = _model("ranks") + ".data"
        browser.wait_for(f"window.Bokeh && Bokeh.documents.length > 0 && {table}.rank.length == 4", "the 4 ranks")
        assert browser.evaluate(f"{table}.rank") == ["rank0", "rank1", "rank2", "rank3"]
        steps = f"{table}.step.map(Number).reduce((a, b) => a + b, 0)"
        before = browser.wait_for(f"{table}.step.every(s => s !== '-') && {steps}", "a step of each rank")
        # (the ranks run until the stop file: these steps arrive while the job runs)
        browser.wait_for(f"{steps} >= {before + 8}", "the page updated with new steps")
        drawn = (
            f"(() => {{ const c = {CELLS}; "
            f"return {table}.step.every((s, i) => c.includes('|' + {table}.rank[i] + '|' + s + '|')); }})()"
        )
        browser.wait_for(f"{steps} >= {before + 16} && {drawn}", "the table drawn with the new steps")
        lines = _model("lines") + ".text"
        browser.wait_for(f"{lines}.includes('straggler: rank2 train:load')", "the straggler line")
        # (which other ranks a starved machine lets lag is the rule's: tests/test_watch.py)
        assert browser.evaluate(f"{table}.state")[2] == "straggler"
        text = browser.wait_for(f"(() => {{ const t = {DEEP_TEXT}; return t.includes('rank3') && t; }})()",
                                "the table drawn")  # fmt: skip
        for word in ("rank0", "rank2", "median ms", "p95 ms", "straggler: rank2 train:load", HOSTILE):
            assert word in text, word
        assert browser.evaluate(DEEP_IMAGES) == 0 and browser.evaluate("window.owned === undefined")

        # A real click on rank2's cell of a step a few steps back (the heatmap's row 2).
        heat = _model("heat") + ".data"
        step = browser.wait_for(
            f"(() => {{ const d = {heat}; const s = [...d.x].filter((x, i) => d.y[i] == 2);"
            " return s.length >= 4 && s[s.length - 3]; })()",
            "rank2's cells",
        )
        click_cell(browser, step, 2)
        picked = browser.wait_for(
            f"{_model('picked')}.text.startsWith('rank2 step {step}: ') && {_model('picked')}.text", "the click"
        )
        shown = browser.wait_for(f"{_model('ranges')}.data.range.length > 0 && {_model('ranges')}.data", "ranges")
        assert sorted(shown["range"]) == ["train:compute", "train:load"], (picked, shown)
        assert shown["ns"] == sorted(shown["ns"], reverse=True)  # (the largest first)
        assert browser.wait_for(f"{DEEP_TEXT}.includes('rank2 step {step}: ')", "the click's text drawn")
        first = f"|{shown['range'][0]}|{shown['ms'][0]}|"
        assert browser.wait_for(f"{CELLS}.includes({json.dumps(first)})", "the ranges drawn")
        shot = tmp_path / "page.png"
        import base64

        shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))
        assert _distinct_colours(shot, tuple(browser.evaluate("[window.innerHeight, window.innerWidth]"))) > 8
        outside = [u for u in browser.requests if u.startswith(("http:", "https:", "ws:", "wss:"))]
        assert outside and all(u.startswith(url) or u.startswith(url.replace("http:", "ws:")) for u in outside), outside

        stop.touch()
        for proc in ranks:
            assert proc.wait(timeout=WAIT) == 0, proc.stderr.read()
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=WAIT)
        assert watch.returncode == 130, err
        assert err.splitlines() == ["nvtx-tf: error: interrupted (SIGINT); stopped watching"], err
    finally:
        if browser is not None:
            browser.close()
        for proc in [*ranks, watch]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # What the click showed is the step's ranges to the ns, as watch --json says them.
    proc = subprocess.run(_cli("watch", folder, "--json", "--until-done"), capture_output=True, text=True,
                          env=env, timeout=WAIT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps = {(o["rank"], o["step"]): o for o in map(json.loads, proc.stdout.splitlines()) if o["kind"] == "step"}
    ranges = steps[("rank2", step)]["ranges"]
    assert dict(zip(shown["range"], shown["ns"])) == ranges
    assert picked.startswith(f"rank2 step {step}: {steps[('rank2', step)]['duration_ns'] / 1e6:.1f} ms")
