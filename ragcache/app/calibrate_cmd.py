"""``ragcache calibrate``: the KV blend license (the group's own options, or ``--plan``) and
``ragcache calibrate semantic`` (the semantic cache's hit decision on a deployment's labelled pairs)."""

from __future__ import annotations

import math
from typing import Optional

import typer

from ragcache.app.argv import number_in
from ragcache.app.output import make_console, run_or_exit
from ragcache.engine.blend.rules import rules_help

calibrate_app = typer.Typer(help="Calibrate a cache to this deployment: license a CacheBlend setting for a model "
                                 "(options below) or fit the semantic hit decision (`calibrate semantic`).")
console = make_console()

RULE_OPTIONS = ("decisive_margin", "max_decisive_flip_rate", "alpha", "large_margin", "min_large_tokens",
                "max_f1_drop", "min_speedup")
"""The license rule's thresholds (:class:`~ragcache.engine.blend.license.LicenseRule` fields); unset: its defaults."""
REPLACED_BY = ("blends are now licensed by the decisive-token rule (ragcache.engine.blend.license): set its "
               "thresholds with --max-decisive-flip-rate, --decisive-margin, --large-margin, --min-large-tokens, "
               "--max-f1-drop, --min-speedup, --alpha, and the candidates with --ratios / --rank-by")
BUILDS_THE_PLAN = ("ratios", "rank_by", "chunk_context", "variants", "seed", "answer_tokens", "yardstick_every",
                   "plan_out", *RULE_OPTIONS)
"""Options that build a plan: meaningless with ``--plan`` (the plan file says all of it)."""


def _retired(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> None:
    """The options of the retired pooled-agreement rule (ragcache issue 40) stop the command, naming what
    replaced them."""
    if value is not None:
        raise typer.BadParameter(f"{param.opts[0]} belonged to the retired pooled-agreement rule; {REPLACED_BY}",
                                 ctx=ctx, param=param)


def _check_plan_only(ctx: typer.Context) -> None:
    """With ``--plan``, an option that builds a plan is a mistake (the plan file decides): say so."""
    given = [f"--{n.replace('_', '-')}" for n in BUILDS_THE_PLAN
             if (src := ctx.get_parameter_source(n)) is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        raise typer.BadParameter(f"{', '.join(given)} build a plan; with --plan the plan file decides (its "
                                 "settings, rule and prompts): drop them, or drop --plan", ctx=ctx,
                                 param_hint="--plan")


@calibrate_app.callback(invoke_without_command=True)
def calibrate(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, help="HF model id or local directory (default: the embedded SmolLM2-135M-Instruct)."),
    data: Optional[str] = typer.Option(None, help="MuSiQue sample (JSON list) the prompts come from; default "
                                                  "$RAGCACHE_DATA_DIR/musique_s.json."),
    start: int = typer.Option(0, min=0, help="First item. Development items only (0-49): never the items a "
                                             "result is reported on."),
    end: int = typer.Option(50, min=1, help="One past the last item (default: all 50 development items; with 2 "
                                            "variants, 100 prompts). Development items only."),
    docs: int = typer.Option(6, min=1, help="Passages per prompt (each one a document; the supporting ones kept)."),
    variants: int = typer.Option(2, min=1, help="Prompts per question: seeded choices and orders of its passages."),
    seed: int = typer.Option(40, min=0, help="Seed of the prompt procedure."),
    ratios: str = typer.Option("0.15,0.20,0.30", help="Comma-separated recompute ratios r: one candidate setting "
                               "each (each candidate more tightens every bound: Bonferroni over k)."),
    rank_by: str = typer.Option("infoflow", "--rank-by", "--selection", help="KV selection rule of the candidates "
                                f"(--selection: its former name): {rules_help()}."),
    chunk_context: str = typer.Option("prefix", help="Chunk KV of the candidates: computed after the stable prefix "
                                      "(prefix) or after BOS alone (sink)."),
    answer_tokens: int = typer.Option(32, min=1, help="Answer length (tokens, stops at EOS): forced through each "
                                      "blend, and the free-running budget."),
    max_decisive_flip_rate: Optional[float] = typer.Option(
        None, callback=number_in(0.0, 1.0, "a share of decisive tokens"),
        help="License rule: bound on the upper confidence bound of the flip rate on decisive tokens "
             "(default 0.01)."),
    decisive_margin: Optional[float] = typer.Option(
        None, callback=number_in(0.0, math.inf, "logits"),
        help="License rule: a token is decisive when full prefill's top-1 leads its top-2 by this many logits "
             "(default 1.0)."),
    alpha: Optional[float] = typer.Option(None, callback=number_in(0.0, 1.0, "a family-wise error rate"),
                                          help="License rule: family-wise one-sided error, split over the k "
                                               "candidates (default 0.05)."),
    large_margin: Optional[float] = typer.Option(
        None, callback=number_in(0.0, math.inf, "logits"),
        help="License rule: no flip allowed on tokens led by this many logits (default 3.0)."),
    min_large_tokens: Optional[int] = typer.Option(None, min=0, help="License rule: ... over at least this many such "
                                                   "tokens (default 300)."),
    max_f1_drop: Optional[float] = typer.Option(None, callback=number_in(0.0, 1.0, "an F1 difference"),
                                                help="License rule: free-running gold F1 may fall at most this far "
                                                     "below full prefill's (default 0.02)."),
    min_speedup: Optional[float] = typer.Option(
        None, callback=number_in(0.0, math.inf, "a speed-up factor"),
        help="License rule: median CPU speed-up over full prefill (x, default 1.5)."),
    yardstick_every: int = typer.Option(1, min=0, help="Run the bfloat16-vs-float32 full-prefill yardstick on every "
                                        "n-th prompt (reported, never gating; holds a bfloat16 copy of the model; "
                                        "0: off)."),
    plan_out: Optional[str] = typer.Option(None, help="Where the plan is written before the run (default: "
                                           "<home>/calibration/plans/plan-<UTC time>.json); must not exist."),
    threads: Optional[int] = typer.Option(None, min=1, help="torch threads (default: torch's)."),
    save: bool = typer.Option(True, help="Record the result for this model (see --home)."),
    home: Optional[str] = typer.Option(None, help="Folder the record goes under, as <home>/calibration/<fingerprint>.json "
                                                  "(default: the ragcache home, where engines read it)."),
    plan: Optional[str] = typer.Option(None, help="Run a plan file written before (ragcache calibrate writes one "
                                       "from its options; e.g. bench/results/calibration_plan_decisive_settings.json) "
                                       "instead of building one."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Write every measurement here, after every item."),
    min_agreement: Optional[str] = typer.Option(None, hidden=True, callback=_retired, expose_value=False),
    confidence: Optional[str] = typer.Option(None, hidden=True, callback=_retired, expose_value=False),
    max_ratio: Optional[str] = typer.Option(None, hidden=True, callback=_retired, expose_value=False),
) -> None:
    """License a CacheBlend setting for a model under the decisive-token rule, and record it: the plan
    (candidates, rule, prompt procedure) is written to a file first, then run; or run a plan file with
    --plan (``ragcache calibrate semantic``: the semantic cache's hit decision on your labelled pairs)."""
    if ctx.invoked_subcommand is None:
        _run(ctx)


def _run(ctx: typer.Context) -> None:
    """Run the plan file of ``--plan``, or build a plan from the options, write it and run it."""
    from ragcache.app.bench_cmd import data_dir
    from ragcache.app.calibrate_settings import main as run_plan, run_options

    o = ctx.params
    common = {"model": o["model"], "data": o["data"] or str(data_dir() / "musique_s.json"), "start": o["start"],
              "end": o["end"], "docs": o["docs"], "threads": o["threads"], "save": o["save"], "home": o["home"],
              "json_path": o["json_out"], "console": console}
    if o["plan"] is not None:
        _check_plan_only(ctx)
        run_or_exit(console, run_plan, plan=o["plan"], **common)
        return
    run_or_exit(console, run_options, **common, ratios=[r.strip() for r in o["ratios"].split(",") if r.strip()],
                rank_by=o["rank_by"], chunk_context=o["chunk_context"], variants=o["variants"], seed=o["seed"],
                answer_tokens=o["answer_tokens"], yardstick_every=o["yardstick_every"], plan_out=o["plan_out"],
                rule={k: o[k] for k in RULE_OPTIONS if o[k] is not None})


@calibrate_app.command("semantic")
def calibrate_semantic(
    pairs: str = typer.Option(..., help='Labelled pairs, JSONL rows {"a": str, "b": str, "same": bool}: same = the '
                                        "answer cached for a may be served for b."),
    precision: float = typer.Option(0.97, help="Precision the decision must reach, with --confidence."),
    confidence: float = typer.Option(0.95, help="One-sided confidence of the Wilson lower bound on precision."),
    save: bool = typer.Option(True, help="Record the threshold for the embedder (see --home)."),
    home: Optional[str] = typer.Option(None, help="Folder the record goes under (default: the ragcache home, where "
                                                  "caches read it)."),
) -> None:
    """Fit the semantic cache's hit threshold (learned verifier score) to your labelled pairs and record it."""
    from ragcache.app.calibrate import semantic_main

    run_or_exit(console, semantic_main, pairs=pairs, precision=precision, confidence=confidence, save=save,
                home=home, console=console)
