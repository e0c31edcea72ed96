"""``ragcache bench lint``: the volatile-text lint on real system prompts nobody here wrote.

The set (``tests/data/system_prompts/prompts.jsonl``, sources and licences in ``SOURCES.md`` beside it)
holds the system, tool-use and planning prompts of open-source agent frameworks (aider, smolagents,
SWE-agent, crewAI, CAMEL, LangChain's open_deep_research, OpenHands, Anthropic's computer-use demo), each as shipped and as the framework
renders it at run time (its own date format in its own date placeholder), with hand labels of what
changes per request. Each rendered prompt goes through :func:`ragcache.prompt.volatile.move_volatile`
(what ``lint="move"`` does) and is scored against the labels:

* false move: a sentence moved out of the stable text that holds no span labelled volatile
  (an instruction rewritten); the target is zero;
* moved / missed: labelled "certain" spans (today's date injected by the framework) that were moved
  or left in the stable prefix;
* counters: labelled per-step counters ("7 steps remaining"), which ``move`` leaves in place by design,
  and whether the lint reports them at all;
* possible flags: findings ``move`` leaves in place (``certain=False``) on unlabelled text (a date in
  an example, "yesterday" in a rule): warnings a reader can dismiss, never a rewrite.

There is no plot: the result is a handful of counts, printed as a table and written as JSON.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from ragcache.app.jsonl import read_jsonl

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "system_prompts" / "prompts.jsonl"


def load_prompts(path: str | Path = DEFAULT_DATA) -> list[dict[str, Any]]:
    """The labelled prompt set: one dict per prompt (``id``, ``repo``, ``path``, ``commit``,
    ``license``, ``text``, ``rendered``, ``volatile``: [{``text``, ``label``}]).

    Raises:
        ValueError: a missing or malformed file (the message names the path).
    """
    p = Path(path)
    rows = []
    for n, row in read_jsonl(p, missing=f"prompt set not found: {p} (pass --data PATH to the prompts.jsonl)"):
        if not isinstance(row, dict) or not {"id", "repo", "rendered", "volatile"} <= row.keys():
            raise ValueError(f"{p}:{n}: a prompt needs id, repo, rendered and volatile fields")
        rows.append(row)
    return rows


def _spans(text: str, needle: str) -> list[tuple[int, int]]:
    out, i = [], text.find(needle)
    while i >= 0:
        out.append((i, i + len(needle)))
        i = text.find(needle, i + 1)
    return out


def score_prompt(row: dict[str, Any]) -> dict[str, Any]:
    """Lint one rendered prompt with ``move_volatile`` and compare with its labels.

    Returns counts (``false_moves``, ``moved``, ``missed``, ``counters``, ``counters_reported``,
    ``possible_flags``) and the texts behind them (``false_move_texts``, ``missed_texts``,
    ``possible_texts``)."""
    from ragcache.prompt.volatile import move_volatile

    text = row["rendered"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _stable, _moved, findings = move_volatile(text, warn=False)
    labelled = [(s, e, lab["label"]) for lab in row["volatile"] for s, e in _spans(text, lab["text"])]
    certain_spans = [(s, e) for s, e, k in labelled if k == "certain"]

    def covers(s: int, e: int, spans: list[tuple[int, int]]) -> bool:
        return any(a < e and s < b for a, b in spans)

    moved_sentences = {f.moved for f in findings if f.moved is not None}
    false_moves = [m for m in moved_sentences if not any(text[s:e] in m for s, e in certain_spans)]
    moved_spans = [(f.start, f.end) for f in findings if f.moved is not None]
    missed = [text[s:e] for s, e in certain_spans if not covers(s, e, moved_spans)]
    counters = [(s, e) for s, e, k in labelled if k == "counter"]
    all_spans = [(f.start, f.end) for f in findings]
    possible = [f.text for f in findings if not f.certain
                and not covers(f.start, f.end, [(s, e) for s, e, _ in labelled])
                and f.moved is None]
    return {"id": row["id"], "repo": row["repo"], "chars": len(text), "false_moves": len(false_moves),
            "moved": len(certain_spans) - len(missed), "certain": len(certain_spans), "missed": len(missed),
            "counters": len(counters), "counters_reported": sum(covers(s, e, all_spans) for s, e in counters),
            "possible_flags": len(possible), "false_move_texts": sorted(false_moves), "missed_texts": missed,
            "possible_texts": possible}


def evaluate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Score every prompt; totals overall and per repository."""
    per_prompt = [score_prompt(r) for r in rows]
    keys = ("false_moves", "certain", "moved", "missed", "counters", "counters_reported", "possible_flags", "chars")
    by_repo: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(("prompts", *keys), 0))
    for p in per_prompt:
        agg = by_repo[p["repo"]]
        agg["prompts"] += 1
        for k in keys:
            agg[k] += p[k]
    total = {k: sum(a[k] for a in by_repo.values()) for k in ("prompts", *keys)}
    return {"total": total, "by_repo": dict(sorted(by_repo.items())), "prompts": per_prompt}


FRAMEWORKS = {"Aider-AI/aider": "aider", "All-Hands-AI/OpenHands": "OpenHands",
              "anthropics/anthropic-quickstarts": "Anthropic computer-use demo", "SWE-agent/SWE-agent": "SWE-agent",
              "camel-ai/camel": "CAMEL",
              "crewAIInc/crewAI": "crewAI", "huggingface/smolagents": "smolagents",
              "langchain-ai/open_deep_research": "open_deep_research (LangChain)"}


def markdown_table(result: dict[str, Any]) -> str:
    """The README's table of :func:`evaluate`'s result (one row per repository and a total)."""
    lines = ["| framework | prompts | false moves | dates moved | dates missed | step counters (reported) "
             "| possible flags |", "|---|---|---|---|---|---|---|"]
    for repo, a in [*result["by_repo"].items(), ("total", result["total"])]:
        name = "**total**" if repo == "total" else FRAMEWORKS.get(repo, repo)
        lines.append(f"| {name} | {a['prompts']} | {a['false_moves']} | {a['moved']} / {a['certain']} | "
                     f"{a['missed']} | {a['counters']} ({a['counters_reported']}) | {a['possible_flags']} |")
    return "\n".join(lines)


def main(json_path: str = "bench/results/lint.json", data: str | None = None) -> dict[str, Any]:
    """Lint the prompt set, print a table, write ``json_path`` (atomically); returns the results."""
    from rich.console import Console
    from rich.table import Table

    from ragcache.atomic import atomic_write_json

    result = evaluate(load_prompts(data or DEFAULT_DATA))
    table = Table(title="volatile-text lint (lint='move') on real agent-framework prompts")
    for col in ("repository", "prompts", "false moves", "dates moved", "dates missed", "counters (reported)",
                "possible flags"):
        table.add_column(col, justify="left" if col == "repository" else "right")
    for repo, a in [*result["by_repo"].items(), ("total", result["total"])]:
        table.add_row(repo, str(a["prompts"]), str(a["false_moves"]), f"{a['moved']}/{a['certain']}",
                      str(a["missed"]), f"{a['counters']} ({a['counters_reported']})", str(a["possible_flags"]))
    console = Console(width=max(120, Console().width))
    console.print(table)
    atomic_write_json(json_path, result)
    console.print(f"wrote {json_path}; README table:")
    console.print(markdown_table(result), markup=False, highlight=False, soft_wrap=True)
    return result
