"""Every fenced python/bash block of README.md runs as written.

A block runs as it stands unless the line before its fence says otherwise:

* ``<!-- readme-test: fragment NAME -->``: the block is completed here, in FRAGMENTS[NAME]
  (a prelude and an epilogue around the block's own text, or files it expects);
* ``<!-- readme-test: skip REASON -->``: not run, for the reason given.

Python blocks run in a fresh interpreter, bash blocks line by line in bash with the test's
interpreter first on PATH (``python`` is it), each in an empty folder that holds a link to
``examples/``, with the recorder attached where a block captures ranges.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import _child_env

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# name -> (prelude, epilogue, files written into the block's folder, attach the recorder)
FRAGMENTS = {
    "api": (
        "",
        textwrap.dedent(
            """
            dense1 = tf.keras.layers.Dense(4)
            print(step(tf.ones([2, 3]), 0).numpy().shape, block(tf.ones([2])).numpy().tolist())
            """
        ),
        {},
        False,
    ),
    # a user's training script: examples/train.py (linked into the block's folder with examples/)
    "train-script": ("", "", {}, False),
    "profile-script": ("", "", {}, False),
    "capture": (
        textwrap.dedent(
            """
            import tensorflow as tf
            import nvtx_plugins_tf as nvtx_tf

            @tf.function
            def step(x, i):
                x, ctx = nvtx_tf.ops.start(x, message="Dense 1", domain_name="Forward")
                return nvtx_tf.ops.end(x * 2.0, ctx)

            x = tf.ones([2])
            step(x, 0)
            """
        ),
        "\ntest_ranges()\nprint('capture block ok')\n",
        {},
        True,
    ),
}

_BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>python|bash)\n(?P<body>.*?)```", re.S)


def _blocks():
    blocks = []
    for match in _BLOCK.finditer(README):
        line = README.count("\n", 0, match.start("body"))
        mark = match.group("mark") or ""
        kind, _, arg = mark.partition(" ")
        blocks.append(pytest.param(match.group("lang"), match.group("body"), kind, arg.strip(), id=f"line{line}"))
    return blocks


def _run(cmd, cwd, env, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.parametrize("lang, body, kind, arg", _blocks())
def test_readme_block_runs_as_written(lang, body, kind, arg, tmp_path):
    if kind == "skip":
        pytest.skip(arg)
    assert kind in ("", "fragment"), f"unknown readme-test mark {kind!r}"
    prelude, epilogue, files, attach = FRAGMENTS[arg] if kind == "fragment" else ("", "", {}, False)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = _child_env(tmp_path / "capture.nvtxrec" if attach else None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if lang == "python":
        script = tmp_path / "block.py"
        script.write_text(prelude + body + epilogue)
        _run([sys.executable, str(script)], tmp_path, env)
        return
    for line in body.splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            _run(["bash", "-c", command], tmp_path, env)


def test_make_demo(tmp_path):
    """The README's first command, in the checkout (what a new user types)."""
    proc = _run(["make", "-C", str(ROOT), "demo"], ROOT, dict(os.environ), timeout=900)
    assert "trace files: out/demo.json" in proc.stdout
    for suffix in ("json", "sqlite", "png"):
        assert (ROOT / "out" / f"demo.{suffix}").stat().st_size > 0


# Names in the prose (issue 21.12: the README named a train.py that did not exist) ------------

_PATH = re.compile(
    r"(?<![\w./-])((?:examples|tests|benchmarks|cc_ops|build_tools|nvtx_plugins_tf|docs|\.ci)/[\w./*-]*\w)"
)
_COMMAND = re.compile(r"(?:nvtx-tf|python -m nvtx_plugins_tf) (record|report|merge|view|doctor|build)\b([^`\n|]*)")


def test_every_repository_path_the_readme_names_exists():
    missing = sorted(
        {p for p in _PATH.findall(README) if not any(ROOT.glob(p.rstrip("/"))) and not (ROOT / p).exists()}
    )
    assert missing == [], missing


def test_every_command_flag_the_readme_names_exists():
    from nvtx_plugins_tf.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "subcommand").choices
    unknown = set()
    for command, rest in _COMMAND.findall(README):
        rest = rest.split(" -- ")[0].split(" #")[0]  # the recorded program and comments are not ours
        flags = set(subparsers[command]._option_string_actions)
        unknown |= {(command, f) for f in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest) if f not in flags}
    assert unknown == set(), sorted(unknown)


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([\w-]+)`", README))
    assert named and named <= targets, sorted(named - targets)


def test_every_script_the_readme_runs_exists():
    """`python X.py` names a file of the repository (relative to its root)."""
    scripts = set(re.findall(r"python3? ([\w./-]+\.py)\b", README))
    assert scripts and sorted(s for s in scripts if not (ROOT / s).is_file()) == []
