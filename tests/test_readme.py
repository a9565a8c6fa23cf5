"""README code blocks run as written (issue 9, item 22; see also the usability issue)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _first_python_block(after_heading: str) -> str:
    section = README[README.index(after_heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_keras_block_runs_as_written(tmp_path):
    script = tmp_path / "keras_block.py"
    script.write_text(_first_python_block("### Keras, session hooks, tf.data"))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
