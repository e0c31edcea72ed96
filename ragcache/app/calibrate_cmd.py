"""``ragcache calibrate``: the KV blend fidelity check (the group's own options) and
``ragcache calibrate semantic`` (the semantic cache's hit decision on a deployment's labelled pairs)."""

from __future__ import annotations

from typing import Optional

import typer

from ragcache.app.argv import number_in
from ragcache.app.output import make_console, run_or_exit

calibrate_app = typer.Typer(help="Calibrate a cache to this deployment: CacheBlend's recompute ratio for a model "
                                 "(options below) or the semantic hit decision (`calibrate semantic`).")
console = make_console()


@calibrate_app.callback(invoke_without_command=True)
def calibrate(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, help="HF model id or local directory (default: embedded SmolLM2-135M)."),
    data: Optional[str] = typer.Option(None, help="MuSiQue sample (JSON list) the prompts come from; default "
                                                  "$RAGCACHE_DATA_DIR/musique_s.json."),
    start: int = typer.Option(0, min=0, help="First item (keep to the development split, 0-49)."),
    end: int = typer.Option(4, min=1, help="One past the last item."),
    docs: int = typer.Option(6, min=1, help="Passages per prompt (each one a document)."),
    ratios: str = typer.Option("0.05,0.10,0.15,0.30,0.50", help="Comma-separated recompute ratios r to try."),
    min_agreement: float = typer.Option(0.95, callback=number_in(0.0, 1.0, "a share of answer tokens"), help="Bound on teacher-forced top-1 agreement."),
    confidence: float = typer.Option(0.95, min=0.0, max=0.999, help="One-sided confidence of the Wilson lower bound "
                                     "(over all answer tokens) that must reach the bound; 0: the pooled agreement."),
    max_ratio: float = typer.Option(0.5, callback=number_in(0.0, 1.0, "a share of the prompt's tokens"), help="Largest r worth blending at; above it exact prefill."),
    answer_tokens: int = typer.Option(32, min=1, help="Teacher-forced answer length (tokens, stops at EOS)."),
    threads: Optional[int] = typer.Option(None, min=1, help="torch threads (default: torch's)."),
    save: bool = typer.Option(True, help="Record the result for this model (see --home)."),
    home: Optional[str] = typer.Option(None, help="Folder the record goes under, as <home>/calibration/<fingerprint>.json "
                                                  "(default: the ragcache home, where engines read it)."),
    selection: Optional[str] = typer.Option(None, help="Selection rule to measure (blend_prefill rank_by: infoflow, "
                                            "prophet, deviation, ...); default the engine's."),
    plan: Optional[str] = typer.Option(None, help="Calibrate named blend settings instead of ratios: a JSON plan "
                                       '{"settings": [BlendSetting fields], "min_agreement", "confidence", '
                                       '"max_mean_share"} (e.g. bench/results/calibration_plan_settings.json).'),
    json_out: Optional[str] = typer.Option(None, "--json", help="With --plan: write every measurement here, after "
                                           "every item."),
) -> None:
    """Measure CacheBlend fidelity against full prefill for a model and record the r to use
    (``ragcache calibrate semantic``: the semantic cache's hit decision on your labelled pairs)."""
    if ctx.invoked_subcommand is not None:
        return
    from ragcache.app.bench_cmd import data_dir
    from ragcache.app.calibrate import main as run

    if plan is not None:
        from ragcache.app.calibrate_settings import main as run_plan

        run_or_exit(console, run_plan, plan=plan, data=data or str(data_dir() / "musique_s.json"), start=start, end=end,
                    docs=docs, threads=threads, save=save, home=home, json_path=json_out, model=model, console=console)
        return

    run_or_exit(console, run, model=model, data=data or str(data_dir() / "musique_s.json"), start=start, end=end,
                docs=docs, ratios=[r.strip() for r in ratios.split(",") if r.strip()], min_agreement=min_agreement,
                confidence=confidence, max_ratio=max_ratio, answer_tokens=answer_tokens, threads=threads, save=save, home=home,
                selection=selection, console=console)



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
