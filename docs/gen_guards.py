"""Generate the table of the semantic cache's guards at build time (mkdocs-gen-files).

The guide ``guides/semantic-cache.md`` holds one marker line, ``MARKER``; the build replaces it with
``guards_table()``: one row per guard of ``GuardSet.default(verifier=...)``, in the order they run,
with what it compares, one pair it refuses and the guard's own words for that refusal, and whether
the learned verifier treats its finding as a hard veto (``DIFFERENT_QUESTION``).

The guard names, their order, the verdicts and the veto column come from
``ragcache.semantic.decision.guards`` itself, and every example is run through the default guards
while the table is made: a guard without a row, a row for a guard that is gone, or an example that
its guard no longer refuses (in either order) raises, so ``mkdocs build`` fails instead of the page
drifting from the code. Importable without mkdocs (the tests call ``guards_table``, ``check_examples``).
"""

from __future__ import annotations

from dataclasses import dataclass

MARKER = "<!-- guards table: generated at build time by docs/gen_guards.py -->"
PAGE = "guides/semantic-cache.md"


@dataclass(frozen=True)
class GuardDoc:
    """A guard's row: what it compares, and a pair of questions it refuses (``None`` for the
    optional verifier, whose verdict is your model's)."""

    compares: str
    example: tuple[str, str] | None


GUARDS: dict[str, GuardDoc] = {
    "number": GuardDoc('numbers and units, in order; a number in words equals its digits ("five" = "5"); a clock '
                       'time keeps its half of the day ("10 am" / "10 pm")',
                       ("How do I keep 5 backups?", "How do I keep 7 backups?")),
    "negation": GuardDoc("the count of negation cues (not, no, never, n't ...)",
                         ("Is the API rate limited?", "Is the API not rate limited?")),
    "question_type": GuardDoc("the kind of answer asked for (who / what / when / where / why / how / how many / "
                              "how long / yes-no ...)",
                              ("When was the invoice sent?", "Who sent the invoice?")),
    "focus": GuardDoc('what is asked about the thing ("what does X contain" is not "what is X", nor "what is in X")',
                      ("What does the starter plan contain?", "What is the starter plan?")),
    "antonym": GuardDoc("an antonym pair split across the two (WordNet 3.0 pairs, plus enable / disable, "
                        "upload / download, un- / dis- / de- prefixes ...)",
                        ("How do I enable two-factor login?", "How do I disable two-factor login?")),
    "scope": GuardDoc("words of one exclusive group (daily / weekly / monthly, all / one, first / last, "
                      "early / late ...)",
                      ("Where are the daily reports?", "Where are the weekly reports?")),
    "entity": GuardDoc('names, acronyms, quoted strings, versions and code identifiers (two names of one country '
                       'are one: "a US citizen" / "American passport holders")',
                       ("How do I install Redis?", "How do I install Postgres?")),
    "direction": GuardDoc('who does what to whom: spans swapped around a connective ("merge A into B", "to Paris" / '
                          '"from Paris"), possessives ("the customer\'s account manager"), the speaker and the one '
                          'addressed ("Can I send you ...?" / "Can you send me ...?"); two alternatives may change '
                          'places ("buy a house or rent")',
                          ("Is Alice Bob's manager?", "Is Bob Alice's manager?")),
    "bound": GuardDoc('a quantifier or bound ("at most", "per day", "include only")',
                      ("How many copies does the backup keep?", "How many copies does the backup keep at most?")),
    "complement": GuardDoc('a complement ("outside", "without", "excluding")',
                           ("Which plans include dental?", "Which plans include everything excluding dental?")),
    "relative_time": GuardDoc('a time relative to now ("this week" / "next week", "today" / none)',
                              ("Who is on call this week?", "Who is on call next week?")),
    "modality": GuardDoc('permission, obligation and prediction ("Can I" / "Must I" / "Do I need to" / "Will I"); '
                         'the modal of "how can I ...", "who can I contact" is a way of asking and is left alone',
                         ("Can I expense a taxi?", "Must I expense a taxi?")),
    "symbol": GuardDoc('a code span, an operator or a meaningful case ("%Y" / "%y", "10 / 2" / "10 * 2", '
                       '"MB" / "Mb")',
                       ("What does %Y mean in strftime?", "What does %y mean in strftime?")),
    "script": GuardDoc("what the word guards cannot read (symbols outside ASCII, names in another script): it must "
                       "be the same text",
                       ("Where is the office in 東京?", "Where is the office in 大阪?")),
    "substitution": GuardDoc('a content word replaced in an otherwise shared frame, or a modifier inserted ("all '
                             'running containers" / "all containers"); synonyms ("film" / "movie") and phrasal '
                             'verbs ("set up" / "configure") are not substitutions',
                             ("How do I free disk space on the build server?",
                              "How do I free memory on the build server?")),
    "verifier": GuardDoc("your `verifier=` callable (a cross-encoder or NLI model) returns False or a score below "
                         "`min_score` (0.5); runs last, only when given",
                         None),
}
"""The prose of each row, keyed by the guard's name (``Guard.name``)."""


def _default_guards():
    """Every guard ``GuardSet.default`` can hold, the optional verifier included (one that refuses
    everything, so its row can be checked too)."""
    from ragcache.semantic.decision.guards import GuardSet

    return GuardSet.default(verifier=lambda query, candidate: False)


def check_examples() -> dict[str, str]:
    """Check the rows against the guards and return each example's refusal detail, by guard name.

    Raises:
        ValueError: a guard has no row or a row names no guard (the message lists them), or an
            example is not refused by its own guard in both orders.
    """
    from ragcache.semantic.decision.guards import GUARD_REASONS

    guards = _default_guards()
    names = guards.names
    if names != list(GUARD_REASONS) or set(GUARDS) != set(names):
        raise ValueError(f"docs/gen_guards.py GUARDS {sorted(GUARDS)} must name exactly the guards "
                         f"{names} (GUARD_REASONS {list(GUARD_REASONS)}): add or remove the rows")
    details: dict[str, str] = {}
    for name, doc in GUARDS.items():
        pairs = [doc.example, doc.example[::-1]] if doc.example else [("How do I rotate a key?",) * 2]
        verdicts = [guards.check(a, b) for a, b in pairs]
        wrong = [(pair, v.reason) for pair, v in zip(pairs, verdicts) if v.reason != name]
        if wrong:
            raise ValueError(f"docs/gen_guards.py: the {name!r} example is not refused by the {name!r} guard "
                             f"(got {wrong}): choose a pair that guard refuses")
        details[name] = verdicts[0].detail
    return details


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def guards_table() -> str:
    """The Markdown table of the guards, in the order they run (checked by ``check_examples``)."""
    from ragcache.semantic.decision.guards import DIFFERENT_QUESTION

    details = check_examples()
    out = ["| guard | refuses when the two questions differ in | example it refuses, and its reason | "
           "hard veto of the learned verifier |", "|---|---|---|---|"]
    for name in _default_guards().names:
        doc = GUARDS[name]
        example = f'"{doc.example[0]}" / "{doc.example[1]}"' if doc.example else "any pair your model refuses"
        out.append(f'| <code class="guard-name">{name}</code> | {_cell(doc.compares)} | '
                   f"{_cell(example)}: `{_cell(details[name])}` | {'yes' if name in DIFFERENT_QUESTION else 'no'} |")
    return "\n".join(out) + "\n"


def fill(page: str) -> str:
    """``page`` with its one ``MARKER`` line replaced by the table.

    Raises:
        ValueError: the page holds the marker line not exactly once.
    """
    if page.count(MARKER) != 1:
        raise ValueError(f"{PAGE} must hold the line {MARKER!r} exactly once (where the guards table goes)")
    return page.replace(MARKER, guards_table())


def main() -> None:
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "r") as f:
        page = f.read()
    with mkdocs_gen_files.open(PAGE, "w") as f:
        f.write(fill(page))


if __name__ == "<run_path>":  # run by mkdocs-gen-files at build time only
    main()
