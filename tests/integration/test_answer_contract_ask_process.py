"""The answer-path contract over ``ragcache ask`` run as a process, as a user runs it: the console
script's argument parsing, its ``--json`` output and, with eight processes at once, single flight
across processes (the answer store's file lock). The model is the contract's scripted backend,
installed in each child before the command runs; its calls are counted in a file all children
append to. The peer that reads what a process stored is ``RagCache`` in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from contract_entries import RagCacheEntry, notes_folder

from ragcache.answering import Answer
from ragcache.backend import CacheUsage
from ragcache.provenance import Provenance
from ragcache.testing.answer_contract import AnswerPathContract, ScriptedBackend

pytestmark = pytest.mark.integration

CHILD = """
import json, sys
from ragcache.testing.answer_contract import ScriptedBackend
import ragcache.app.ask as ask_module

spec, calls = json.loads(sys.argv[1]), sys.argv[2]
backend = ScriptedBackend(**spec)
generate = backend.generate

def counted(layout, **kw):
    with open(calls, "a") as f:
        f.write("call\\n")
    return generate(layout, **kw)

backend.generate = counted
ask_module.LazyLocalBackend = lambda *a, **k: backend
sys.argv = ["ragcache", "ask", *sys.argv[3:]]
from ragcache.app.entry import main
main()
"""


class AskProcessEntry:
    """``ragcache ask QUESTION --docs FOLDER --json`` in a child process."""

    name = "ragcache ask (process)"
    stores_length = True  # cache_truncated=True, as in-process

    def __init__(self, backend: ScriptedBackend, folder: Path) -> None:
        self.backend, self.folder = backend, folder
        self.calls = folder.parent / f"calls-{id(backend)}.log"
        self.spec = {"text": backend.text, "finish": backend.finish, "delay_s": backend.delay_s,
                     "approximate": backend.approximate, "recompute_ratio": backend.recompute_ratio,
                     "blend_setting": backend.blend_setting}

    def ask(self, question: str) -> Answer:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(self.spec), str(self.calls), question,
                            "--docs", str(self.folder), "--json"], capture_output=True, text=True, env=env,
                           timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        d = json.loads(r.stdout)
        with self.backend._lock:  # the children's calls, as the contract counts them
            self.backend.calls = len(self.calls.read_text().splitlines()) if self.calls.exists() else 0
        return Answer(d["question"], d["answer"], d["layer"], CacheUsage(**d["usage"]), d["ttft_s"], d["total_s"],
                      d["similarity"], d["matched_question"], provenance=Provenance.from_metadata(d))


@pytest.fixture()
def notes(tmp_path, monkeypatch) -> Path:
    return notes_folder(tmp_path, monkeypatch)


@pytest.fixture()
def make_entry(notes):
    return lambda backend: AskProcessEntry(backend, notes)


@pytest.fixture(params=["itself", "RagCache"])
def make_other(request, notes):
    if request.param == "itself":
        return lambda backend: AskProcessEntry(backend, notes)
    return lambda backend: RagCacheEntry(backend, notes)


class TestAskProcessAnswerPath(AnswerPathContract):
    """Every check of the contract over ``ragcache ask`` as a process (eight processes at once for the
    single-flight check)."""
