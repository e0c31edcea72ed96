"""``ragcache bench ask``: a repeated ``ragcache ask`` end to end, process start included.

Each run is a fresh ``python -m ragcache.app.entry ask --json`` process, as a user types it. The
first ask of the question answers with the model (a miss, unless an earlier run stored it); the
next ``repeats`` are semantic hits, the number the issue's target (<= 1.0 s on an idle machine)
is about, and as many asks of a paraphrase (:data:`PARAPHRASE`), a hit whose differing words the
guards look up in WordNet. Alongside, ``python -c pass`` (the interpreter's own start) and the import of the CLI
alone and ``ragcache cache stats`` (another command run just before each ask, as a user does),
interleaved with the asks so load changes hit all alike. One more hit runs under ``python -X
importtime``: what a hit imports (:func:`hit_imports`; torch, transformers and sentence-transformers
must not be among them).

Reported per run: wall time, and CPU time (user + system of the child, from ``getrusage``). On a
loaded machine wall time also counts the time the process waited for a core; the CPU time is
what the same run costs on an idle core (an estimate: it leaves out reads that miss the page
cache). The load average (``os.getloadavg``) is recorded before and after.

By default the answers, index and KV go to a folder of their own (``--home``/bench-ask/...), and
the models come from ``$RAGCACHE_HOME`` as for any ask; ``--docs`` defaults to three short notes
written there. Bytecode caches are allowed in the children (``PYTHONDONTWRITEBYTECODE`` is
dropped), as in an installed package.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from ragcache.home import Home

NOTES = {
    "keys.md": "# Rotating API keys\n\nTo rotate the API keys, open the admin console, choose Settings > "
               "Security and press Rotate. The old key keeps working for 24 hours so that running jobs can "
               "finish. Then update the key in the vault.\n",
    "backups.md": "# Backups\n\nNightly backups run at 02:00 UTC and are kept for 30 days. To restore, run "
                  "the restore command with the date on the database host.\n",
    "deploy.txt": "Deploys go out from the main branch through the CI pipeline. A failed deploy rolls back on "
                  "its own after the health check fails three times.\n",
}
QUESTION = "How do I rotate the API keys?"
PARAPHRASE = "Rotating the API keys: how?"  # a hit whose differing words go through WordNet


def _child_env(home: Path, root: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    root = root or str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    bench = Home(home / "bench-ask")
    for var, path in (("RAGCACHE_ANSWERS_DIR", bench.answers), ("RAGCACHE_INDEX_DIR", bench.index),
                      ("RAGCACHE_KV_DIR", bench.chunks)):
        env[var] = str(path)
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd`` in the first ``PYTHONPATH`` folder (``python -c`` / ``-m`` put the working folder first
    on ``sys.path``, so it decides which checkout is imported); its wall and CPU seconds and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    cwd = env["PYTHONPATH"].split(os.pathsep)[0]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise RuntimeError(f"bench ask: {' '.join(cmd[:4])} ... exited {r.returncode}:\n{r.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stdout": r.stdout}


def _commands(ask: list[str], paraphrase: list[str], env: dict[str, str], root: Path,
              against: list[str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Name -> (command, environment) of every timed run."""
    cmds = {"python -c pass": ([sys.executable, "-c", "pass"], env),
            "import ragcache.app.cli": ([sys.executable, "-c", "import ragcache.app.cli"], env),
            # another command first, as a user runs one (``ragcache cache stats``), then the ask
            "ragcache cache stats": ([sys.executable, "-m", "ragcache.app.entry", "cache", "stats"], env),
            "ask repeat": (ask, env), "ask paraphrase": (paraphrase, env)}
    for other in against:
        if not (Path(other) / "ragcache" / "__init__.py").is_file():
            raise ValueError(f"--against {other!r} holds no ragcache package (give a checkout's root folder)")
        other_env = _child_env(root, str(Path(other).resolve()))
        cmds[f"ask repeat [{other}]"] = (ask, other_env)
        cmds[f"ask paraphrase [{other}]"] = (paraphrase, other_env)
    return cmds


HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "numpy", "pydantic", "typer", "tokenizers",
         "rapidfuzz", "sqlite3", "rich")
"""Top-level packages whose import time a semantic hit reports (torch, transformers and
sentence-transformers must be absent: the question is embedded by the NumPy runtime)."""


def hit_imports(ask: list[str], env: dict[str, str], top: int = 12) -> dict[str, Any]:
    """One more hit under ``python -X importtime``: the total import time, the cumulative import time
    of each :data:`HEAVY` package imported (absent ones are not listed), and the ``top`` modules by
    their own import time (microseconds, as ``-X importtime`` prints them; inflated under load alike)."""
    cwd = env["PYTHONPATH"].split(os.pathsep)[0]
    r = subprocess.run([sys.executable, "-X", "importtime", *ask[1:]], capture_output=True, text=True, env=env,
                       check=False, cwd=cwd)
    rows = []
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cum, name = line[len("import time:"):].split("|", 2)
            rows.append((name.strip(), int(own), int(cum), len(name) - len(name.lstrip())))
    package = {}
    for n, _, c, _ in rows:  # a package's own row (at whatever depth it was first imported)
        package.setdefault(n, c)
    return {"total_import_us": sum(c for _, _, c, indent in rows if indent <= 1),
            "heavy_us": {h: package[h] for h in HEAVY if h in package},
            "torch_free": not any(n.split(".")[0] in ("torch", "transformers", "sentence_transformers")
                                  for n, *_ in rows),
            "top_self_us": [[n, own] for n, own, _, _ in sorted(rows, key=lambda x: -x[1])[:top]]}


def _run_all(cmds: dict[str, tuple[list[str], dict[str, str]]], repeats: int) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` rounds, each running every command once (interleaved, so load changes hit all alike)."""
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in cmds}
    for _ in range(repeats):
        for name, (cmd, cmd_env) in cmds.items():
            r = _timed(cmd, cmd_env)
            out = r.pop("stdout")
            if name.startswith("ask "):
                d = json.loads(out)
                r.update(layer=d["layer"], similarity=d["similarity"], inside_s=d["timings_s"]["command_s"],
                         embedder_s=d["timings_s"]["embedder_s"])
            runs[name].append(r)
    return runs


def main(json_path: str | None = "bench/results/ask_latency.json", plot_path: str | None = None,
         docs: str | None = None, question: str = QUESTION, paraphrase: str = PARAPHRASE, repeats: int = 7,
         home: str | None = None, against: list[str] | None = None) -> dict[str, Any]:
    """Time ``repeats`` repeated and paraphrased asks (and the baselines) in fresh processes; print,
    write JSON, plot. ``against``: other checkouts (folders holding a ``ragcache`` package, e.g. an
    older commit's ``git archive``) timed interleaved with this one, as ``ask ... [DIR]``.

    Raises:
        ValueError: ``repeats`` < 1, an ``against`` folder without ragcache.
        RuntimeError: an ask failed (its stderr is in the message).
    """
    from ragcache.config import Config

    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    root = Path(home) if home else Config.from_env().home
    env = _child_env(root)
    if docs is None:
        folder = root / "bench-ask" / "notes"
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in NOTES.items():
            (folder / name).write_text(text, encoding="utf-8")
        docs = str(folder)
    docs = str(Path(docs).resolve())
    ask = [sys.executable, "-m", "ragcache.app.entry", "ask", "--docs", docs, "--json"]
    load_before = os.getloadavg()
    first = _timed([*ask, question], env)
    first["layer"] = json.loads(first.pop("stdout"))["layer"]
    runs = _run_all(_commands([*ask, question], [*ask, paraphrase], env, root, against or []), repeats)
    imports = hit_imports([*ask, question], env)
    load_after = os.getloadavg()
    summary: dict[str, dict[str, Any]] = {}
    for n, rs in runs.items():
        summary[n] = {"wall_s_median": median(r["wall_s"] for r in rs), "cpu_s_median": median(r["cpu_s"] for r in rs),
                      "wall_s": [r["wall_s"] for r in rs], "cpu_s": [r["cpu_s"] for r in rs]}
        if n.startswith("ask "):
            summary[n].update(inside_command_s_median=median(r["inside_s"] for r in rs),
                              layers=sorted({r["layer"] for r in rs}), similarity=rs[0]["similarity"])
    width = max(len(n) for n in summary) + 2
    print(f"{'run':<{width}} {'wall (s)':>9} {'CPU (s)':>8} {'inside (s)':>10}  layer")
    print(f"{'ask (first: ' + first['layer'] + ')':<{width}} {first['wall_s']:>9.2f} {first['cpu_s']:>8.2f}")
    for n, s in summary.items():
        inside = f"{s['inside_command_s_median']:>10.2f}  {','.join(s['layers'])}" if "layers" in s else ""
        print(f"{n:<{width}} {s['wall_s_median']:>9.2f} {s['cpu_s_median']:>8.2f} {inside}")
    print(f"medians of {repeats}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{os.cpu_count()} CPUs; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"imports of a hit (-X importtime): {imports['total_import_us'] / 1e6:.2f} s; torch, transformers and "
          f"sentence-transformers {'not ' if imports['torch_free'] else ''}imported; "
          + ", ".join(f"{k} {v / 1e6:.2f} s" for k, v in imports["heavy_us"].items()))
    result = {"question": question, "paraphrase": paraphrase, "docs": docs, "repeats": repeats,
              "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "load_avg_before": load_before, "load_avg_after": load_after, "first": first, "runs": summary,
              "hit_imports": imports,
              "target_s": 1.0}
    if json_path:
        from ragcache.atomic import atomic_write_json

        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(json_path, result)
    _plot(summary, load_before[0], plot_path)
    return result


def _plot(summary: dict[str, dict[str, Any]], load: float, plot_path: str | None) -> None:
    from benchmarks.plotting import draw

    def plot() -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 0.5 * len(summary) + 1.2))
        names = list(summary)
        ax.barh(names, [summary[n]["wall_s_median"] for n in names], label="wall")
        ax.barh(names, [summary[n]["cpu_s_median"] for n in names], height=0.4, label="CPU")
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_xlabel("seconds (median)")
        ax.set_title(f"ragcache ask, fresh processes (load {load:.1f})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot_path)

    draw(plot, plot_path)
