"""pandas fidelity: every tools runner reads a checkout's CSVs the way in-process pandas does.

SOP-Bench declares pandas>=2.0.0. The sandbox image used to carry Debian's pandas 1.5, where a CSV
cell holding the text ``None`` is the string "None" instead of a missing value, so a tool returning
such a cell answered ``"None"`` in the default (Docker) runner where upstream answers ``NaN``. The
fixture domain ``cells`` (our own code) holds None/NA/null/N/A/<NA>/NULL/nan texts, empty cells and
floats longer than a double; every runner must give the texts computed here with in-process pandas.
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pandas as pd
import pytest

from sopgym.sandboxes.base import SandboxError
from sopgym.sopbench import Recording, RecordingDrift, record_groundtruth, register
from sopgym.sopbench.runners import (
    InProcessToolRunner,
    check_pandas_version,
    image_pandas_version,
    runner_pandas_version,
)

from .helpers import FIXTURES

CSV = FIXTURES / "cells" / "test_set_with_outputs.csv"
MISSING_TEXTS = {"R1": "None", "R2": "NA", "R3": "", "R5": "null", "R6": "N/A", "R7": "<NA>"}


def major(version: str) -> int:
    return int(version.split(".")[0])


@pytest.fixture
def cells(tmp_path):
    return register(FIXTURES, recordings_dir=tmp_path).domains["cells"]


def expected_answers() -> list[tuple[str, dict, str]]:
    """``(tool, args, text)`` computed here with in-process pandas, independently of any runner."""
    df = pd.read_csv(CSV)
    out = []
    for record_id in df["record_id"]:
        row = df[df["record_id"] == record_id].iloc[0]
        out.append(("get_rehabilitation_status", {"record_id": record_id},
                    json.dumps({"record_id": record_id, "rehabilitation_status": row["rehab_status"]})))
        out.append(("get_record", {"record_id": record_id}, json.dumps({c: row[c] for c in df.columns})))
    for column in df.columns:
        out.append(("column_values", {"column": column}, json.dumps(df[column].tolist())))
    out.append(("column_dtypes", {}, json.dumps({c: str(t) for c, t in df.dtypes.items()})))
    out.append(("missing_cells", {}, json.dumps([[r, c] for c in df.columns for r, v in zip(df["record_id"], df[c]) if pd.isna(v)])))
    return out


@pytest.mark.parametrize("record_id", sorted(MISSING_TEXTS))
def test_missing_value_texts_are_nan_in_every_runner(runner_factory, cells, record_id):
    text = runner_factory(cells).call("get_rehabilitation_status", {"record_id": record_id})["text"]
    assert text == f'{{"record_id": "{record_id}", "rehabilitation_status": NaN}}', (
        f"cell {MISSING_TEXTS[record_id]!r}: expected NaN as pandas>=2 reads it, got {text}"
    )


def test_every_runner_answers_like_in_process_pandas(runner_factory, cells):
    expected = expected_answers()
    got = runner_factory(cells).call_many([(name, args) for name, args, _ in expected])
    mismatches = [(name, args, want, answer["text"]) for (name, args, want), answer in zip(expected, got)
                  if answer != {"kind": "ok", "exc_type": "", "text": want}]
    assert mismatches == []


def test_every_runner_reports_a_pandas_in_upstreams_range_and_of_this_major(runner_factory, cells):
    runner = runner_factory(cells)
    runner.call("column_dtypes", {})
    assert runner.pandas_version is not None and major(runner.pandas_version) >= 2
    assert major(runner.pandas_version) == major(pd.__version__), (
        f"tools run with pandas {runner.pandas_version}, this interpreter has {pd.__version__}: "
        "the image's pin (sopgym/sandboxes/docker/requirements.txt) must follow the host's major version"
    )


def test_the_image_pins_a_pandas_of_the_host_major_version():
    assert major(image_pandas_version()) == major(pd.__version__) >= 2


@pytest.mark.parametrize("version", ["1.5.3", "0.25.0", "", None])
def test_a_pandas_outside_upstreams_range_is_refused(version):
    with pytest.raises(SandboxError, match=re.escape("pandas>=2.0.0")):
        check_pandas_version(version, "the test interpreter")


@pytest.mark.parametrize("kind", ["docker", "inprocess"])
def test_info_reports_the_pandas_the_tools_runner_uses(cells, kind):
    env = gym.make("sopbench/cells-v0", tools_runner=kind, trust_tools_code=kind != "docker")
    _, info = env.reset(options={"task_index": 0})
    env.close()
    expected = image_pandas_version() if kind == "docker" else pd.__version__
    assert info["sopbench"]["pandas_version"] == runner_pandas_version(kind) == expected


def test_a_recording_stores_the_pandas_its_tools_ran_with(cells, tmp_path):
    rec, _ = record_groundtruth(cells, lambda: InProcessToolRunner(cells))
    path = rec.save(tmp_path / "cells.json")
    assert Recording.load(path).pandas_version == pd.__version__
    assert json.loads(path.read_text())["pandas_version"] == pd.__version__


def _recorded_with(cells, tmp_path, version):
    rec, _ = record_groundtruth(cells, lambda: InProcessToolRunner(cells))
    data = rec.to_json()
    if version is None:  # a format-1 file, written before sopgym stored the version
        data["format"] = 1
        del data["pandas_version"]
    else:
        data["pandas_version"] = version
    (tmp_path / "cells.json").write_text(json.dumps(data))


@pytest.mark.parametrize("version", ["1.5.3", None])
def test_a_recording_made_with_another_pandas_is_drift(cells, tmp_path, version):
    _recorded_with(cells, tmp_path, version)
    with pytest.raises(RecordingDrift, match=f"recorded with pandas {re.escape(version or 'of unknown version')}"):
        Recording.load_for(cells, tmp_path / "cells.json", pandas_version=pd.__version__)
    with pytest.raises(RecordingDrift, match="re-run `sopgym sopbench record`"):
        gym.make("sopbench/cells-v0", tool_mode="replay", tools_runner="inprocess", trust_tools_code=True)


def test_auto_mode_runs_live_past_a_recording_of_another_pandas(cells, tmp_path):
    _recorded_with(cells, tmp_path, "1.5.3")
    with pytest.warns(UserWarning, match="recorded with pandas 1.5.3.*ignoring the recording"):
        env = gym.make("sopbench/cells-v0", tool_mode="auto", tools_runner="inprocess", trust_tools_code=True)
    _, info = env.reset(options={"task_index": 0})
    obs, *_ = env.step('<tool_call>{"name": "get_rehabilitation_status", "arguments": {"record_id": "R1"}}</tool_call>')
    env.close()
    assert info["sopbench"]["recording_pandas_version"] == "1.5.3"
    assert "recorded with pandas 1.5.3" in info["sopbench"]["recording_drift"]
    assert '"rehabilitation_status": NaN' in obs


def test_a_sandbox_pandas_of_another_major_than_this_interpreter_is_noted(cells, monkeypatch):
    import sopgym.sopbench.sopbench_env as sopbench_env

    monkeypatch.setattr(sopbench_env, "host_pandas_version", lambda: "2.2.3")
    env = gym.make("sopbench/cells-v0")
    _, info = env.reset(options={"task_index": 0})
    env.close()
    assert any(f"tools run with pandas {image_pandas_version()} (docker runner) but this interpreter" in note
               and "has pandas 2.2.3" in note for note in info["sopbench"]["notes"]), info["sopbench"]["notes"]


def test_the_dockerfile_installs_the_pinned_packages_like_the_offline_build():
    image = pytest.importorskip("sopgym.sandboxes.docker.image", reason="needs the docker SDK (sopgym[docker])")
    dockerfile = (image.HERE / "Dockerfile").read_text(encoding="utf-8")
    assert image.packages_dockerfile_lines() in dockerfile
    assert image.packages_dockerfile_lines() in image.offline_dockerfile("base")
    assert "python3-pandas" not in dockerfile and "python3-pandas" not in image.RECIPE["include"]
