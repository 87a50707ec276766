"""The trajectory format's version (sopgym.trajectory): written in a run's first line, and a file of
another version refused by each reader with one message naming the file, the line, the version found
and the version this sopgym reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sopgym import cli
from sopgym.bench.suite import read_trajectory_run
from sopgym.evaluation.episode_text import read_trajectory
from sopgym.evaluation.records import iter_jsonl, load_records

WR = "sopgym/WarehouseReceiving-v0"


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> Path:
    """A finished `sopgym eval` run's trajectory file."""
    path = tmp_path_factory.mktemp("run") / "t.jsonl"
    assert cli.main(["eval", "--env", WR, "--policy", "oracle", "--episodes", "1", "--n-bootstrap", "0", "--quiet",
                     "--trajectories", str(path)]) == 0
    return path


def _of_format(run_file: Path, tmp_path: Path, version) -> Path:
    """The run's file with its run line's format changed to ``version``."""
    lines = run_file.read_text().splitlines(keepends=True)
    run = json.loads(lines[0])
    run["format"] = version
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(run) + "\n" + "".join(lines[1:]))
    return path


def test_a_run_writes_the_format_version_in_its_first_line(run_file):
    from sopgym.trajectory import TRAJECTORY_FORMAT

    first = json.loads(run_file.read_text().splitlines()[0])
    assert (first["type"], first["format"]) == ("run", TRAJECTORY_FORMAT) and TRAJECTORY_FORMAT == 1


@pytest.mark.parametrize("reader", [load_records, read_trajectory, read_trajectory_run],
                         ids=["load_records", "show", "resume"])
@pytest.mark.parametrize("version", [2, "1"])
def test_every_reader_refuses_a_file_of_another_format_naming_found_and_expected(run_file, tmp_path, reader, version):
    path = _of_format(run_file, tmp_path, version)
    with pytest.raises(ValueError) as caught:
        reader(path)
    assert str(caught.value) == f"{path}:1: the run line's format is {json.dumps(version)}; this version reads format 1"


@pytest.mark.parametrize("reader", [load_records, read_trajectory, read_trajectory_run],
                         ids=["load_records", "show", "resume"])
def test_every_reader_reads_a_file_of_this_format(run_file, reader):
    assert reader(run_file)  # records, or (run line, episodes, ...)


READERS = [load_records, lambda path: list(iter_jsonl(path)), read_trajectory, read_trajectory_run]
READER_IDS = ["load_records", "iter_jsonl", "show", "resume"]
#: A damaged second line, and what every reader says it found there.
DAMAGES = {
    "not UTF-8": (b'{"type": "reset", "episode_index": 0, "observation": "\xff\xfe"}\n',
                  "bytes that are not UTF-8 (b'\\xff' at offset 54 of the line: invalid start byte)"),
    "not JSON": (b"{not json\n", "invalid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
}


@pytest.mark.parametrize("reader", READERS, ids=READER_IDS)
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_reader_words_an_unreadable_line_one_way_naming_the_file_and_line(run_file, tmp_path, reader, damage):
    line, found = DAMAGES[damage]
    lines = run_file.read_bytes().splitlines(keepends=True)
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(lines[0] + line + b"".join(lines[2:]))
    with pytest.raises(ValueError) as caught:
        reader(path)
    assert str(caught.value) == f"{path}:2: expected a JSON object per line in UTF-8, got {found}"
