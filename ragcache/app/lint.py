"""``ragcache lint FILE [--against FILE2]``: what in a request breaks the cache prefix, and where.

Reads a JSON file holding a chat messages list or a request object (Anthropic
style ``{"system", "tools", "messages"}``, or OpenAI style with ``system``
messages). It reports volatile text (dates, times, weekdays, UUIDs,
request ids, counters) found by :func:`ragcache.prompt.volatile.find_volatile`: certainly
volatile text (an id, a timestamp, a date or time after a "now" cue) in the system
text and tools is an error (it changes the prefix every request); text that may be
fixed (a date in a rule, "Friday") and anything in the document blocks of the final
user turn is reported for review. With
``against`` it renders both requests block by block in prefix order (tools ->
system -> messages) and prints the first divergence: the block and the token
index in the concatenated render, like comparing two chat-template renders
token by token. Tokens are the embedded model's (SmolLM2) when its converted
copy exists under ``$RAGCACHE_HOME``, else word / punctuation tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ragcache.app.output import clean, error, say
from ragcache.prompt.volatile import find_volatile, first_divergence, word_tokens
from ragcache.providers.anthropic.blocks import FlatBlock, RequestError, flatten_request


_EXPECTED = ("ragcache lint reads a JSON request: an object of messages.create keyword arguments "
             '({"system": "...", "messages": [...]}) or a messages list ([{"role": "user", "content": "..."}]); '
             "to lint a prompt kept as text or Markdown, put it in such a file")


def load_request(path: str | Path) -> dict[str, Any]:
    """A lint input as an Anthropic-style body ``{"system", "tools", "messages"}``.

    Raises:
        ValueError: an unreadable file, not JSON (a Markdown or text file: the message says what lint
            reads), or an unknown shape.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f" ({e.msg} at line {e.lineno} column {e.colno})" if isinstance(e, json.JSONDecodeError) and e.pos else ""
        raise ValueError(f"{path} is not JSON{where}: {_EXPECTED}") from None
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError(f"{path}: expected a messages list or an object with a 'messages' list")
    system_parts = [m["content"] for m in data["messages"] if isinstance(m, dict) and m.get("role") == "system"]
    body: dict[str, Any] = {
        "tools": data.get("tools") or [],
        "messages": [m for m in data["messages"] if not (isinstance(m, dict) and m.get("role") == "system")],
    }
    system = data.get("system")
    if system_parts:
        texts = [p if isinstance(p, str) else "\n".join(b.get("text", "") for b in p) for p in system_parts]
        system = "\n\n".join(([system] if isinstance(system, str) else []) + texts)
    if system is not None:
        body["system"] = system
    return body


def _tokenizer() -> tuple[str, Callable[[str], list[Any]], Callable[[list[Any]], str]]:
    """(name, encode, decode): the embedded model's tokenizer if already converted (never
    converts), else word / punctuation tokens."""
    try:
        from ragcache.config import Config
        from ragcache.models import DEFAULT_MODEL

        path = Config.from_env().paths.model_dir(DEFAULT_MODEL)
        if (path / "tokenizer.json").is_file():
            from transformers import AutoTokenizer

            from ragcache.engine.text_ids import text_ids

            tok = AutoTokenizer.from_pretrained(str(path))
            return DEFAULT_MODEL, lambda text: text_ids(tok, text), tok.decode
    except Exception:  # noqa: BLE001 - any failure falls back to the tokenizer-free proxy
        pass
    return "word/punctuation", word_tokens, "".join


def _printable(text: str) -> str:
    """``repr`` of untrusted prompt text with rich markup escaped (control characters are escaped by repr)."""
    from rich.markup import escape

    return escape(repr(text))


def _blocks(path: str) -> list[FlatBlock]:
    try:
        return flatten_request(load_request(path))
    except RequestError as e:
        raise ValueError(f"{path}: {e}") from None


def run_lint(path: str, against: str | None = None, *, console: Console | None = None) -> int:
    """Lint ``path`` (and compare with ``against``); print a rich report; return the exit code
    (0 clean, 1 a problem in the stable prefix, 2 unreadable input)."""
    console = console or Console()
    try:
        blocks = _blocks(path)
        other = _blocks(against) if against else None
    except (ValueError, TypeError) as e:
        error(console, str(e))
        return 2
    last_msg = blocks[-1].path[1] if blocks[-1].section == "messages" else None
    table = Table(title=Text(clean(f"volatile text in {path}", newlines=False)))
    for col in ("block", "severity", "kind", "text", "char"):
        table.add_column(col)
    errors = 0
    for b in blocks:
        if b.section == "messages" and (b.path[1] != last_msg or b.index == blocks[-1].index):
            continue  # history is append-only; the question is meant to change
        for f in find_volatile(b.text):
            severity = "error" if f.certain and b.section in ("system", "tools") else "review"
            errors += severity == "error"
            table.add_row(Text(clean(b.where, newlines=False)), severity,
                          f.kind if f.certain else f"possible {f.kind}", _printable(f.text), str(f.start))
    if table.row_count:
        console.print(table)
        console.print("error: certainly volatile text (an id, a timestamp, a date or time after 'Current date:' / "
                      "'Today is') in system/tools changes the cached prefix on every request; move it after the "
                      "documents (PromptLayout volatile=..., or lint='move', which moves only these). review: text "
                      "that may change per request (a date in a rule or example, 'Friday', 'turn #3'); lint='move' "
                      "leaves it in place.")
    else:
        say(console, (f"no volatile text found in the stable parts of {path}", "green"))
    diverged_in_prefix = False
    if other is not None:
        diverged_in_prefix = _compare(console, path, blocks, against, other)
    return 1 if errors or diverged_in_prefix else 0


def _compare(console: Console, path: str, a: list[FlatBlock], against: str, b: list[FlatBlock]) -> bool:
    """Print the first divergence; True when it lies before the final user block."""
    first_block = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x.key != y.key), None)
    if first_block is None and len(a) == len(b):
        say(console, (f"{path} and {against} render identically", "green"))
        return False
    if first_block is None:
        first_block = min(len(a), len(b))
    tok_name, tokenize, detok = _tokenizer()
    toks_a = [tokenize(blk.text) for blk in a]
    toks_b = [tokenize(blk.text) for blk in b]
    offset = sum(len(t) for t in toks_a[:first_block])
    ta = toks_a[first_block] if first_block < len(a) else []
    tb = toks_b[first_block] if first_block < len(b) else []
    i = offset + (first_divergence(ta, tb) or 0)
    blk = a[min(first_block, len(a) - 1)]
    in_prefix = first_block < len(a) - 1
    say(console, f"first divergence at token {i} of {sum(len(t) for t in toks_a)} ({tok_name} tokens; "
                 f"block {first_block}: {blk.where}, {blk.section})")
    toks_a = [tok for blk_toks in toks_a for tok in blk_toks]
    toks_b = [tok for blk_toks in toks_b for tok in blk_toks]
    say(console, f"  {path}: ...{detok(toks_a[max(0, i - 8):i + 8])!r}")
    say(console, f"  {against}: ...{detok(toks_b[max(0, i - 8):i + 8])!r}")
    if in_prefix:
        console.print(f"[red]the prefix differs before the final block: a cache breakpoint after block "
                      f"{first_block} cannot be read by the other request[/red]")
    else:
        console.print("[green]only the final block differs: the whole prefix before it can be cached[/green]")
    return in_prefix

