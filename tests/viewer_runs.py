"""Real runs for the viewer's tests: ``sopgym eval`` with the oracle and the random policy on the same
tasks of a stateless and a stateful env (CustomerServiceTroubleshooting's tickets and port resets),
with their results files and trajectories."""

from __future__ import annotations

from pathlib import Path

from sopgym import cli

ENVS = ("sopgym/WarehouseReceiving-v0", "sopgym/CustomerServiceTroubleshooting-v0")
STATEFUL = "sopgym/CustomerServiceTroubleshooting-v0"
TASKS, SAMPLES = 3, 2


def make_runs(folder: Path) -> dict[str, Path]:
    """``{policy: trajectory file}`` for ``oracle`` and ``random`` (results beside: ``POLICY.json``)."""
    files = {}
    for policy in ("oracle", "random"):
        code = cli.main(["eval", "--env", *ENVS, "--policy", policy, "--episodes", str(TASKS), "--samples-per-task",
                         str(SAMPLES), "--k", "2", "--n-bootstrap", "50", "--quiet", "--out", str(folder / f"{policy}.json"),
                         "--trajectories", str(folder / f"{policy}.jsonl")])
        assert code == 0
        files[policy] = folder / f"{policy}.jsonl"
    return files


def viewer_document(page: Path) -> dict:
    """The JSON document embedded in a viewer page, read back as the page's script reads it."""
    import json

    text = page.read_text(encoding="utf-8")
    tag = '<script type="application/json" id="sopgym-data">'
    start = text.index(tag) + len(tag)
    return json.loads(text[start:text.index("</script>", start)])
