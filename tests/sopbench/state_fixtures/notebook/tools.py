"""Fixture tools that keep state every way a tools.py can (written for sopgym's tests; not upstream code).

Tests run a copy of this folder: write_note changes the files beside it.
"""

import os
import random
import time

import numpy as np
import pandas as pd

SEEN = []  # module global
SHM_NOTE = "/dev/shm/sopgym-notebook-note"


class NotebookManager:
    shared = []  # class attribute

    def __init__(self):
        self.here = os.path.dirname(os.path.abspath(__file__))
        self.notes = []

    def process_tool_call(self, tool_name, parameters):
        if tool_name in ("write_note", "read_notes", "write_shm", "process_ids", "user_ids", "draw", "sleep", "crash"):
            return getattr(self, tool_name)(**parameters)
        raise ValueError(f"Unknown tool: {tool_name}")

    def write_note(self, text):
        SEEN.append(text)
        NotebookManager.shared.append(text)
        self.notes.append(text)
        with open(os.path.join(self.here, "notes.txt"), "a") as fh:  # a new file beside the tools
            fh.write(text + "\n")
        with open(os.path.join(self.here, "test_set_with_outputs.csv"), "a") as fh:  # a shipped file changed
            fh.write(f"{text},changed\n")
        os.remove(os.path.join(self.here, "sop.txt"))  # a shipped file deleted
        elsewhere = os.path.join(os.path.dirname(self.here), "elsewhere")  # beside the domain folder
        os.makedirs(elsewhere, exist_ok=True)
        with open(os.path.join(elsewhere, "note.txt"), "w") as fh:
            fh.write(text)
        os.makedirs(os.path.join(self.here, "cache", "deep"), exist_ok=True)  # a folder, made read-only
        os.chmod(os.path.join(self.here, "cache"), 0o500)
        pd.set_option("display.max_rows", 3)
        return len(self.notes)

    def read_notes(self):
        cache = os.path.join(self.here, "cache")
        return {
            "module": SEEN,
            "class": NotebookManager.shared,
            "instance": self.notes,
            "notes_file": os.path.exists(os.path.join(self.here, "notes.txt")),
            "task_rows": len(pd.read_csv(os.path.join(self.here, "test_set_with_outputs.csv"))),
            "sop_present": os.path.exists(os.path.join(self.here, "sop.txt")),
            "elsewhere": os.path.exists(os.path.join(os.path.dirname(self.here), "elsewhere")),
            "cache_folder": os.path.exists(cache),
            "pandas_max_rows": pd.get_option("display.max_rows"),
            "shm_note": os.path.exists(SHM_NOTE),
        }

    def write_shm(self, text):
        with open(SHM_NOTE, "w") as fh:
            fh.write(text)
        return True

    def process_ids(self):
        return [os.getpid(), os.getppid()]

    def user_ids(self):
        return [os.getuid(), os.geteuid()]

    def draw(self):
        return [random.random(), float(np.random.random())]

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def crash(self):
        os._exit(3)
