"""Every fenced python/bash block of README.md and of the guide (docs/*.md) runs as written.

A block runs as it stands unless the line before its fence says otherwise:

* ``<!-- doc-test: fragment NAME -->``: the block runs with FRAGMENTS[NAME]'s set-up (files it
  expects, the recorder attached); no code is added to it (issue 45: every block runs as a
  reader copies it, ``test_no_fragment_adds_code``);
* ``<!-- doc-test: file NAME -->``: a python block that runs as written and is also the file
  NAME that a later block of the same page uses;
* ``<!-- doc-test: with NAME -->``: the block runs with that file of its page in its folder;
* ``<!-- doc-test: skip REASON -->``: not run, for the reason given.

Python blocks run in a fresh interpreter, bash blocks line by line in bash with the test's
interpreter first on PATH (``python`` is it), each in an empty folder that holds a link to
``examples/``, with the recorder attached where a block captures ranges.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _child_env

ROOT = Path(__file__).resolve().parents[1]
#: README.md and every page of the guide, by path relative to the repository
DOCS = {
    p.relative_to(ROOT).as_posix(): p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
ALL_TEXT = "\n".join(DOCS.values())

# name -> (prelude, epilogue, files written into the block's folder, attach the recorder)
FRAGMENTS = {
    # a user's training script: examples/train.py (linked into the block's folder with examples/)
    "train-script": ("", "", {}, False),
    "profile-script": ("", "", {}, False),
}

_BLOCK = re.compile(r"(?:<!-- doc-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
_RUN = ("python", "bash")  # other blocks (text, pycon, yaml) are shown, not run


def test_no_fragment_adds_code():
    """A block of the docs is the whole program: no prelude or epilogue completes it here
    (docs/ops.md's first block used a ``dense1`` that only a hidden prelude defined)."""
    added = {name: code for name, (*code, _, _) in FRAGMENTS.items() if any(code)}
    assert added == {}
    used = set(re.findall(r"<!-- doc-test: fragment (\S+) -->", ALL_TEXT))
    assert used <= set(FRAGMENTS), used - set(FRAGMENTS)


def _page_blocks(text):
    """(lang, body, kind, arg, line) of each fenced block of ``text``."""
    for match in _BLOCK.finditer(text):
        kind, _, arg = (match.group("mark") or "").partition(" ")
        yield match.group("lang"), match.group("body"), kind, arg.strip(), text.count("\n", 0, match.start("body"))


def _page_files(text) -> dict:
    """The blocks of a page marked ``file NAME``: NAME -> text."""
    return {arg: body for _, body, kind, arg, _ in _page_blocks(text) if kind == "file"}


def _blocks():
    blocks = []
    for page, text in DOCS.items():
        files = _page_files(text)
        for lang, body, kind, arg, line in _page_blocks(text):
            blocks.append(pytest.param(lang, body, kind, arg, files, id=f"{page}:line{line}"))
    return blocks


def _run(cmd, cwd, env, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.parametrize("lang, body, kind, arg, page_files", _blocks())
def test_doc_block_runs_as_written(lang, body, kind, arg, page_files, tmp_path):
    if kind == "skip":
        pytest.skip(arg)
    assert kind in ("", "fragment", "file", "with"), f"unknown doc-test mark {kind!r}"
    assert lang in _RUN or kind == "", f"a doc-test mark on a {lang!r} block, which is not run"
    if lang not in _RUN:
        assert lang, "a fenced block without a language: give it one (python, bash, text, ...)"
        return
    prelude, epilogue, files, attach = FRAGMENTS[arg] if kind == "fragment" else ("", "", {}, False)
    if kind == "with":
        assert arg in page_files, f"no block marked 'file {arg}' on this page"
        files = {arg: page_files[arg]}
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
        command, _, comment = line.partition("#")
        command = command.strip()
        if command:
            _run(["bash", "-c", command], tmp_path, env)
            _check_record_outputs(command, tmp_path)
            _check_written(comment, tmp_path)


def _check_written(comment: str, folder: Path) -> None:
    """A line whose comment says ``# writes A and B (...)`` (or ``A, B``) made A and B
    (issue 45, row 2: the page's export line wrote nothing and said it wrote two)."""
    comment = re.sub(r"\(.*?\)", "", comment).strip()
    if not comment.startswith("writes "):
        return
    names = [n.strip() for n in re.split(r",| and ", comment[len("writes ") :]) if n.strip()]
    assert names, comment
    missing = [n for n in names if not (folder / n).exists()]
    assert missing == [], (comment, missing)


_RECORD = re.compile(r"(?:nvtx-tf|python -m nvtx_plugins_tf) (?:record|merge) (?P<flags>.*?)(?: -- |$)")


def _check_record_outputs(command: str, folder: Path) -> None:
    """A `record` (or `merge`) line wrote the timeline where the docs say: PREFIX.json,
    PREFIX.sqlite, PREFIX.nvtxrec/, and PREFIX.png with --png or --png-window."""
    match = _RECORD.search(command)
    if not match:
        return
    flags = match.group("flags").split()
    prefix = folder / flags[flags.index("-o") + 1]
    expected = [".json", ".sqlite", ".nvtxrec"] + ([".png"] if {"--png", "--png-window"} & set(flags) else [])
    missing = [s for s in expected if not prefix.with_name(prefix.name + s).exists()]
    assert missing == [], (command, missing)


def test_make_demo(tmp_path):
    """The README's first command, in the checkout (what a new user types)."""
    proc = _run(["make", "-C", str(ROOT), "demo"], ROOT, dict(os.environ), timeout=900)
    assert "trace files: out/demo.json" in proc.stdout
    for suffix in ("json", "sqlite", "png"):
        assert (ROOT / "out" / f"demo.{suffix}").stat().st_size > 0


# Names in the prose (issue 21.12: the README named a train.py that did not exist), in the
# README and every page of the guide ---------------------------------------------------------

_PATH = re.compile(
    r"(?<![\w./-])((?:examples|tests|benchmarks|cc_ops|build_tools|nvtx_plugins_tf|docs|\.ci)/[\w./*-]*\w)"
)
_COMMAND = re.compile(r"(?:nvtx-tf|python -m nvtx_plugins_tf) (record|report|merge|view|doctor|build)\b([^`\n|]*)")


def test_every_repository_path_the_docs_name_exists():
    missing = sorted(
        {p for p in _PATH.findall(ALL_TEXT) if not any(ROOT.glob(p.rstrip("/"))) and not (ROOT / p).exists()}
    )
    assert missing == [], missing


def test_every_command_flag_the_docs_name_exists():
    from nvtx_plugins_tf.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "subcommand").choices
    unknown = set()
    for command, rest in _COMMAND.findall(ALL_TEXT):
        rest = rest.split(" -- ")[0].split(" #")[0]  # the recorded program and comments are not ours
        flags = set(subparsers[command]._option_string_actions)
        unknown |= {(command, f) for f in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest) if f not in flags}
    assert unknown == set(), sorted(unknown)


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([\w-]+)`", ALL_TEXT)) | set(re.findall(r"^make ([\w-]+)", ALL_TEXT, re.M))
    assert named and named <= targets, sorted(named - targets)


def test_every_script_the_docs_run_exists():
    """`python X.py` names a file of the repository (relative to its root), or a file a block
    of the same page writes (``doc-test: file X``)."""
    missing = set()
    for text in DOCS.values():
        scripts = set(re.findall(r"python3? ([\w./-]+\.py)\b", text))
        missing |= {s for s in scripts if not (ROOT / s).is_file() and s not in _page_files(text)}
    assert sorted(missing) == []


def test_distributed_page_says_what_merge_writes(tmp_path):
    """docs/distributed.md's 'What to run' block, run as written, gives what the page then says
    (issue 45, row 10): processes named `host1:python`, and a merge.json that lists each
    source's raw segments (`.nvtxseg`) while the folder holds them packed (`.nvtxsegz`)."""
    import json
    import sqlite3

    text = DOCS["docs/distributed.md"]
    body = text[text.index("**What to run.**") :].split("```bash\n", 1)[1].split("```", 1)[0]
    env = _child_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for line in body.splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            _run(["bash", "-c", command], tmp_path, env)
    names = {row[0] for row in sqlite3.connect(tmp_path / "out" / "job.sqlite").execute("SELECT name FROM PROCESSES")}
    assert names == {"host1:python", "host2:python"}, names
    assert "`host1:python`" in text and "host1:python3" not in text
    job = tmp_path / "out" / "job.nvtxrec"
    listed = [s for source in json.loads((job / "merge.json").read_text())["sources"] for s in source["segments"]]
    assert listed and all(s.endswith(".nvtxseg") for s in listed), listed
    assert sorted(p.name for p in job.glob("*.nvtxsegz")) == sorted(s + "z" for s in listed)
    assert "`PID-START.nvtxseg`" in text and re.search(r"same names as\s+`\.nvtxsegz`", text)
