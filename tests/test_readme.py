"""The README's Python snippets run as written, in order, against a real agent.

Each ```python block is saved to a file and run with this interpreter from a directory whose
`./infinistream-data` is the agent's store, as a user who followed the quick start would; the
one change is the client URL, the agent's free port for the documented 4222.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import infinistream
from agentproc import running_agent

README = Path(__file__).resolve().parent.parent / "README.md"
DOCUMENTED_URL = "nats://127.0.0.1:4222"
# The snippets run from another directory: this checkout's sources, by absolute path.
SOURCES = str(Path(infinistream.__file__).resolve().parent.parent)


def python_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_has_the_quick_start_snippet() -> None:
    snippets = python_snippets()
    assert snippets and DOCUMENTED_URL in snippets[0]


def test_readme_snippets_run_as_written(tmp_path: Path) -> None:
    with running_agent(tmp_path / "infinistream-data") as agent:
        outputs = []
        for i, snippet in enumerate(python_snippets()):
            script = tmp_path / f"snippet{i}.py"
            script.write_text(snippet.replace(DOCUMENTED_URL, agent.url))
            done = subprocess.run(
                [sys.executable, str(script)],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PYTHONPATH": SOURCES},
            )
            assert done.returncode == 0, f"snippet {i}:\n{snippet}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
    # The quick start's publish, and the data source reading it back (batch, then streaming).
    assert outputs[0].strip() == "1 b'hello'"
    assert len(outputs) >= 2 and outputs[1].count("orders.new") == 2, outputs[1]


def test_readme_config_example_is_valid(tmp_path: Path) -> None:
    """The config file example of "Running it" passes nats-server's `-t` check."""
    examples = re.findall(r"^```\n(listen:.*?)^```", README.read_text(), re.M | re.S)
    assert len(examples) == 1
    conf = tmp_path / "agent.conf"
    conf.write_text(examples[0])
    done = subprocess.run(
        [sys.executable, "-m", "infinistream", "serve", "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": SOURCES},
    )
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stderr
