"""The two pictures of docs/watch.md, made again from a real job: docs/watch_terminal.png (the
terminal view, as rich exports it to SVG, drawn by headless Chromium) and docs/watch_web.png
(the ``--web`` page in headless Chromium while the job runs, a cell of the straggler clicked).

The job is tests/test_watch.py's: 4 ranks of 120 ms steps under ``nvtx-tf record``, rank 2's
"load" 60 ms longer. Needs Chromium (``chromium``), the ``watch``, ``web`` and ``test`` extras.

python build_tools/watch_screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

RANK = """
import sys, time, nvtx
rank, steps = int(sys.argv[1]), int(sys.argv[2])
for i in range(steps):
    with nvtx.annotate(f"step {i}", domain="train"):
        with nvtx.annotate("load", domain="train"):
            time.sleep(0.030 + (0.060 if rank == 2 else 0.0))
        with nvtx.annotate("compute", domain="train"):
            time.sleep(0.090)
"""
RANKS, STEPS = 4, 90


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _shoot(browser, path: Path, width: int, height: int) -> None:
    """A PNG of the page's top-left ``width`` x ``height`` CSS pixels."""
    clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
    data = browser.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]
    path.write_bytes(base64.b64decode(data))


def web_page(folder: Path, script: Path, tmp: Path, out: Path) -> None:
    """The page of a live job, rank2's cell of a recent step clicked."""
    from test_viewer import Browser, _chromium
    from test_watch_web import click_cell

    watch = subprocess.Popen(_cli("watch", folder, "--web", "127.0.0.1:0"), stdout=subprocess.PIPE, text=True)
    url = watch.stdout.readline().split()[-1]
    ranks = [subprocess.Popen(_cli("record", "-o", folder / f"rank{r}", "--", sys.executable, script, r, STEPS),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(RANKS)]  # fmt: skip
    browser = Browser(_chromium(), tmp / "profile", tmp / "chromium.log")
    model = "Bokeh.documents[0].get_model_by_name"
    try:
        browser.call("Page.enable")
        browser.call("Emulation.setDeviceMetricsOverride", width=980, height=1000, deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=url)
        browser.wait_for(f"window.Bokeh && Bokeh.documents.length > 0 && {model}('ranks').data.rank.length == 4",
                         "the ranks")  # fmt: skip
        browser.wait_for(f"Math.min(...{model}('ranks').data.step.map(Number)) >= 30", "30 steps of each rank")
        step = browser.evaluate(f"Math.min(...{model}('ranks').data.step.map(Number)) - 4")
        click_cell(browser, step, 2)
        browser.wait_for(f"{model}('ranges').data.range.length > 0", "the click")
        time.sleep(1.0)  # (drawn)
        bottom = browser.evaluate(f"Bokeh.index.find_one({model}('ranges_table')).el.getBoundingClientRect().bottom")
        _shoot(browser, out, 960, int(bottom) + 10)
    finally:
        browser.close()
        for p in ranks:
            p.wait()
        watch.send_signal(2)
        watch.wait()


def terminal(folder: Path, tmp: Path, out: Path) -> None:
    """The terminal view of the finished job (rich's SVG export, drawn by Chromium)."""
    from rich.console import Console
    from test_viewer import Browser, _chromium

    from nvtx_plugins_tf.recorder.watch import Watch
    from nvtx_plugins_tf.recorder.watch.view import Board, _renderable

    watch, board = Watch([str(folder)]), Board()
    while not watch.done:
        for obj in watch.poll():
            board.add(obj)
        time.sleep(0.2)
    for source in watch.tailer.sources.values():
        for result in source.results:
            board.done(watch.steps.name_of(result))
    width = 132
    console = Console(record=True, width=width, file=open("/dev/null", "w"), color_system="truecolor")
    console.print(_renderable(board, f"nvtx-tf watch ({folder.name}, every 0.5 s)", width))
    svg = tmp / "terminal.svg"
    # (rich names Fira Code, fetched from a CDN: here a monospace font of the machine draws it)
    text = console.export_svg(title="nvtx-tf watch runs").replace("Fira Code", "DejaVu Sans Mono")
    text = text.replace('local("FiraCode-Regular")', 'local("DejaVu Sans Mono")')
    svg.write_text(text)
    browser = Browser(_chromium(), tmp / "profile-svg", tmp / "chromium-svg.log")
    try:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=svg.as_uri())
        size = browser.wait_for(
            "(() => { const s = document.querySelector('svg'); if (!s) return null; const v = s.viewBox.baseVal;"
            " s.setAttribute('width', v.width); s.setAttribute('height', v.height);"
            " return v.width > 0 && [Math.ceil(v.width), Math.ceil(v.height)]; })()",
            "the SVG",
        )
        time.sleep(0.5)
        _shoot(browser, out, *size)
    finally:
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        script, folder = tmp / "rank.py", tmp / "runs"
        script.write_text(RANK)
        folder.mkdir()
        web_page(folder, script, tmp, args.out / "watch_web.png")
        terminal(folder, tmp, args.out / "watch_terminal.png")
    for name in ("watch_web.png", "watch_terminal.png"):
        print(f"wrote {args.out / name} ({(args.out / name).stat().st_size / 1e3:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
