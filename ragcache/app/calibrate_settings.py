"""``ragcache calibrate --plan PLAN.json``: calibrate named blend settings on MuSiQue development items.

The plan file (JSON) is written before the run, by hand or by ``ragcache calibrate`` from its options
(:func:`run_options`: :func:`build_plan`, then :func:`write_plan`, then :func:`main`): ``{"settings": [BlendSetting fields...], "rule": {"name":
"decisive-flips-v1", thresholds...}, "prompts": {"variants": 2, "seed": 40, "docs": 6},
"answer_tokens": 32, "yardstick_every": 1, "note": "..."}`` (:meth:`SettingsPlan.to_dict
<ragcache.engine.blend.setting.SettingsPlan.to_dict>`). With ``"prompts"`` the prompts are
:func:`ragcache.app.calibrate.calibration_variants`; without, :func:`ragcache.app.calibrate.musique_prompts`
(the item's first ``docs`` passages). A plan without ``"rule"`` (the retired pooled-agreement rule)
is measured and licenses nothing. The measurement and the decision are
:func:`ragcache.engine.blend.setting.calibrate_settings`; the table and verdict are printed, the full
measurement written to ``--json`` (when given) and the record saved where engines read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragcache.atomic import atomic_write_json


def read_plan(path: str | Path) -> Any:
    """The :class:`~ragcache.engine.blend.setting.SettingsPlan` in ``path``.

    Raises:
        ValueError: missing or malformed file, or a bad setting (the message names it).
    """
    from ragcache.engine.blend.setting import BlendSetting, SettingsPlan

    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"plan file {p} not found") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"plan file {p} is not JSON ({e})") from None
    if not isinstance(d, dict) or not isinstance(d.get("settings"), list) or not d["settings"]:
        raise ValueError(f"plan file {p} must be a JSON object with a non-empty list 'settings'")
    try:
        settings = [BlendSetting.from_dict(s) for s in d["settings"]]
    except TypeError as e:
        raise ValueError(f"plan file {p}: {e}") from None
    from ragcache.engine.blend.license import RULE_NAME, LicenseRule

    rule_d = d.get("rule")
    if rule_d is not None and (not isinstance(rule_d, dict) or rule_d.get("name") != RULE_NAME):
        raise ValueError(f"plan file {p}: 'rule' must be an object named {RULE_NAME!r} (the license rule's "
                         f"thresholds, ragcache.engine.blend.license.LicenseRule); got {rule_d!r}")
    prompts = d.get("prompts") or {}
    if not isinstance(prompts, dict) or set(prompts) - {"variants", "seed", "docs", "first_variant"}:
        raise ValueError(f"plan file {p}: 'prompts' takes variants, seed, docs, first_variant; got {prompts!r}")
    try:
        rule = None if rule_d is None else LicenseRule.from_dict(rule_d)
    except (TypeError, ValueError) as e:
        raise ValueError(f"plan file {p}: {e}") from None
    return SettingsPlan(settings=settings, min_agreement=float(d.get("min_agreement", 0.95)),
                        confidence=float(d.get("confidence", 0.95)),
                        max_mean_share=float(d.get("max_mean_share", 0.30)),
                        answer_tokens=int(d.get("answer_tokens", 32)), note=str(d.get("note", "")),
                        rule=rule, prompts=dict(prompts), yardstick_every=int(d.get("yardstick_every", 0)))


def build_plan(*, ratios: Sequence[float] | Sequence[str] | None = None, rank_by: str = "infoflow",
               chunk_context: str = "prefix", variants: int = 2, seed: int = 40, docs: int = 6,
               answer_tokens: int = 32, yardstick_every: int = 1, rule: dict[str, Any] | None = None,
               note: str = "") -> Any:
    """The :class:`~ragcache.engine.blend.setting.SettingsPlan` ``ragcache calibrate`` runs when given no
    ``--plan``: one candidate per ratio (:func:`~ragcache.engine.blend.setting.candidate_settings`), the
    license rule with ``rule``'s thresholds over the defaults, fresh prompts from
    :func:`ragcache.app.calibrate.calibration_variants` (``variants`` per question, ``seed``, ``docs``
    passages), the bfloat16 yardstick on every ``yardstick_every``-th prompt (0: never).

    Raises:
        ValueError: a bad ratio, KV selection rule (``rank_by``), chunk context, threshold or count (the message names it).
    """
    from ragcache.engine.blend.license import LicenseRule
    from ragcache.engine.blend.setting import DEFAULT_CANDIDATE_RATIOS, SettingsPlan, candidate_settings

    for name, v, low in (("variants", variants, 1), ("docs", docs, 1), ("answer_tokens", answer_tokens, 1),
                         ("yardstick_every", yardstick_every, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {v!r}")
    try:
        lic = LicenseRule(**(rule or {}))
    except TypeError as e:
        raise ValueError(f"license rule: {e}") from None
    settings = candidate_settings(DEFAULT_CANDIDATE_RATIOS if ratios is None else ratios, rank_by=rank_by,
                                  chunk_context=chunk_context)
    return SettingsPlan(settings=settings, rule=lic, answer_tokens=answer_tokens, yardstick_every=yardstick_every,
                        prompts={"variants": variants, "seed": seed, "docs": docs}, note=note)


def plan_path(home: Any, now: datetime | None = None) -> Path:
    """Where a plan goes by default: ``<home>/calibration/plans/plan-<UTC time>.json`` (``-2``, ``-3``, ...
    added when that name is taken, so an earlier plan is never overwritten)."""
    from ragcache.home import Home

    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    folder = Home.of(home).calibration / "plans"
    path, n = folder / f"plan-{stamp}.json", 1
    while path.exists():
        n += 1
        path = folder / f"plan-{stamp}-{n}.json"
    return path


def write_plan(plan: Any, path: str | Path) -> Path:
    """Write ``plan`` (a SettingsPlan) as JSON to ``path``, which must not exist yet (a plan is written once,
    before its run); returns the path.

    Raises:
        ValueError: ``path`` exists.
    """
    path = Path(path).expanduser()
    if path.exists():
        raise ValueError(f"{path} exists: a plan is written once, before its run. Pass another --plan-out, or run "
                         f"that plan with --plan {path}")
    atomic_write_json(path, plan.to_dict(), indent=1)
    return path


def run_options(model: str | None = None, data: str | Path = "", start: int = 0, end: int = 50, docs: int = 6,
                ratios: Sequence[float] | Sequence[str] | None = None, rank_by: str = "infoflow",
                chunk_context: str = "prefix", variants: int = 2, seed: int = 40, answer_tokens: int = 32,
                yardstick_every: int = 1, rule: dict[str, Any] | None = None, threads: int | None = None,
                save: bool = True, home: str | None = None, plan_out: str | Path | None = None,
                json_path: str | None = None, console: Console | None = None) -> Any:
    """``ragcache calibrate`` without ``--plan``: build the plan from the options (:func:`build_plan`), write it
    to ``plan_out`` (default :func:`plan_path` under ``home``, default ``$RAGCACHE_HOME``) *before* anything is
    measured, say where, then run it exactly as ``--plan`` does (:func:`main`: the table, the verdict, the
    record). Returns the :class:`~ragcache.engine.blend.calibration.Calibration`.

    Raises:
        ValueError: a bad option (before the plan is written), an existing ``plan_out``, an empty item range;
            after the plan is written: a missing data file, a model that cannot load.
    """
    from ragcache.app.calibrate import DEV_ITEMS
    from ragcache.app.output import err_console
    from ragcache.config import Config

    console = console or Console()
    if end <= start:
        raise ValueError(f"no items in [{start}, {end}): --end must be > --start")
    when = datetime.now(timezone.utc)
    plan = build_plan(ratios=ratios, rank_by=rank_by, chunk_context=chunk_context, variants=variants, seed=seed,
                      docs=docs, answer_tokens=answer_tokens, yardstick_every=yardstick_every, rule=rule,
                      note=f"ragcache calibrate --model {model or 'embedded'}: plan written "
                           f"{when.isoformat(timespec='seconds')} before the run.")
    home = home or Config.from_env().paths
    path = write_plan(plan, plan_out if plan_out else plan_path(home, when))
    console.print(f"plan written to {path} before the run ({len(plan.settings)} candidates, rule "
                  f"{plan.rule.to_dict()['name']}); to run it again: ragcache calibrate --plan {path}")
    if end > DEV_ITEMS:
        err_console().print(f"warning: items {DEV_ITEMS}-{end - 1} are past the development split "
                            f"(0-{DEV_ITEMS - 1}); a calibration run on evaluation items makes them development items")
    return main(plan=path, data=data, start=start, end=end, docs=docs, threads=threads, save=save, home=home,
                json_path=json_path, model=model, console=console)


def main(plan: str | Path, data: str | Path, start: int = 0, end: int = 50, docs: int = 6, threads: int | None = None,
         save: bool = True, home: str | None = None, json_path: str | None = None, model: str | None = None,
         console: Console | None = None) -> Any:
    """Run the plan on items ``[start, end)``; print the table; return the Calibration."""
    import torch

    from ragcache.app.calibrate import calibration_variants, musique_prompts
    from ragcache.engine.blend.setting import calibrate_settings
    from ragcache.engine.blend.calibration import calibration_path
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.engine import LocalEngine

    from ragcache.config import Config

    console = console or Console()
    sp = read_plan(plan)
    cfg = Config.from_env()
    home = home or cfg.paths  # where the CLI's engines read records, as the record line below says
    if threads:
        torch.set_num_threads(threads)
    if sp.prompts:  # the plan's fresh prompts: variants per question, prompt index = item * variants + v
        pv = {"variants": 2, "seed": 40, "docs": docs, "first_variant": 0} | sp.prompts
        prompts, golds, _ = calibration_variants(data, start, end, variants=pv["variants"], docs=pv["docs"],
                                                 seed=pv["seed"], first_variant=pv["first_variant"])
        first = start * pv["variants"] + 1000 * pv["first_variant"]
        what = f"{pv['variants']} variants per question (seed {pv['seed']}, {pv['docs']} passages)"
    else:
        prompts, first, what = musique_prompts(data, start, end, docs), start, f"first {docs} passages each"
        golds = [list(x["answers"]) for x in json.loads(Path(data).read_text())[start:end]]
    sp.note = (f"{sp.note} items {start}-{end - 1} of {Path(data).name}, {what}, "
               f"torch threads {torch.get_num_threads()}, load at start {[round(x, 2) for x in os.getloadavg()]}"
               ).strip()
    engine = LocalEngine.from_pretrained(model, chunk_cache=ChunkCache(kv_format=cfg.kv_format,
                                                                      group_size=cfg.kv_group_size),
                                         calibration=False, home=cfg.paths)  # the chunk format the CLI serves with

    def keep(measured: list[dict]) -> None:  # the measurement so far, after every item
        if json_path:
            atomic_write_json(Path(json_path), {"complete": False, "items": [start, end], "note": sp.note,
                                                "load_avg": [round(x, 2) for x in os.getloadavg()],
                                                "measured": measured}, indent=1)

    cal = calibrate_settings(engine, prompts, sp, save=save, home=home, progress=lambda line: console.print(line),
                             checkpoint=keep, first_index=first, golds=golds)
    cal.note += f"; load at end {[round(x, 2) for x in os.getloadavg()]}"
    if json_path:
        atomic_write_json(Path(json_path), {**cal.to_dict(), "complete": True}, indent=1)
    show(cal, sp, f"items {start}-{end - 1}", console)
    if save:
        console.print(f"recorded in {calibration_path(cal.fingerprint, home)}")
    return cal


def show(cal: Any, sp: Any, what: str, console: Console) -> None:
    """Print the settings table of a Calibration and its decision (the license rule's four figures when
    the plan has the rule; the retired rule's agreement table otherwise)."""
    if sp.rule is None:
        t = Table(title=f"blend settings vs full prefill, {cal.model}: {what}, "
                        f"{sp.answer_tokens} teacher-forced tokens (retired pooled-agreement rule: licenses nothing)")
        for c in ("setting", "pooled agreement (tokens)", f"lower bound ({sp.confidence:g})", "mean KL",
                  "mean share", "exact", "median CPU speed-up"):
            t.add_column(c, justify="right")
        for row in cal.settings:
            t.add_row(row["name"], f"{row['pooled_top1_agreement']:.3f} ({row['answer_tokens']})",
                      f"{row['agreement_lower_bound']:.3f}", f"{row['mean_kl']:.4f}", f"{row['mean_share']:.3f}",
                      str(row["exact_fallbacks"]), f"{row['median_cpu_speedup']:.2f}x")
        console.print(t)
        console.print(cal.verdict())
        return
    r = sp.rule
    t = Table(title=f"blend license ({cal.rule['name']}) vs full prefill, {cal.model}: {what}, "
                    f"{sp.answer_tokens}-token answers")
    for c in (f"setting", f"decisive flips (m >= {r.decisive_margin:g})", f"upper bound (conf.)",
              f"flips at m >= {r.large_margin:g}", "F1 blend / full", "median CPU speed-up", "all-token agreement",
              "mean KL", "licensed"):
        t.add_column(c, justify="right")
    for row in cal.settings:
        lic = row["license"]
        t.add_row(row["name"], f"{lic['decisive_flips']} / {lic['decisive_tokens']}",
                  f"{lic['decisive_flip_upper']:.2%} ({lic['confidence']:.4g})",
                  f"{lic['large_flips']} / {lic['large_tokens']}", f"{lic['f1']:.3f} / {lic['ref_f1']:.3f}",
                  f"{lic['median_cpu_speedup']:.2f}x", f"{row['pooled_top1_agreement']:.3f}", f"{row['mean_kl']:.4f}",
                  "yes" if lic["licensed"] else "no: " + ", ".join(lic["failed"]))
    console.print(t)
    if cal.yardstick:
        y = cal.yardstick
        console.print(f"yardstick: bfloat16 vs float32 full prefill flips {y['flips']}/{y['tokens']} tokens "
                      f"({y['flip_rate']:.2%}), {y['decisive_flips']}/{y['decisive_tokens']} decisive "
                      f"({y['decisive_flip_rate']:.2%}), {y['prompts']} prompts")
    console.print(cal.verdict())


def merge(plan: str | Path, parts: list[str | Path], *, model: str | None = None, save: bool = False,
          home: str | None = None, json_path: str | None = None, console: Console | None = None) -> Any:
    """The record of several runs of one plan over disjoint items (their ``--json`` files, complete
    or partial), decided by the plan's rule over every prompt they measured.

    Raises:
        ValueError: a part measured other settings than the plan, or two parts share a prompt.
    """
    from ragcache.engine.blend.setting import record_settings
    from ragcache.engine.engine import LocalEngine

    console = console or Console()
    sp = read_plan(plan)
    names = [s.name for s in sp.settings]
    merged = [{"setting": s.to_dict(), "per_prompt": []} for s in sp.settings]
    notes = []
    for part in parts:
        d = json.loads(Path(part).read_text())
        measured = d.get("measured") or [{"setting": r["setting"], "per_prompt": r["per_prompt"]}
                                         for r in d.get("settings", [])]
        if [m["setting"]["name"] for m in measured] != names:
            raise ValueError(f"{part} measured {[m['setting']['name'] for m in measured]}, not the plan's {names}")
        for acc, m in zip(merged, measured):
            acc["per_prompt"] += m["per_prompt"]
        notes.append(f"{Path(part).name}: {'complete' if d.get('complete') else 'partial'}, {d.get('note', '')}")
    seen = [x["prompt"] for x in merged[0]["per_prompt"]]
    if len(seen) != len(set(seen)):
        raise ValueError(f"the parts overlap: prompts {sorted(seen)}")
    n = min(len(m["per_prompt"]) for m in merged)
    for m in merged:  # a partial part may stop mid-item: keep the prompts every setting measured
        m["per_prompt"] = m["per_prompt"][:n] if len(m["per_prompt"]) > n else m["per_prompt"]
    engine = LocalEngine.from_pretrained(model, calibration=False)
    sp.note = f"{sp.note} merged: " + " | ".join(notes)
    cal = record_settings(engine, merged, sp, n_prompts=n, save=save, home=home)
    if json_path:
        atomic_write_json(Path(json_path), cal.to_dict(), indent=1)
    show(cal, sp, f"items {sorted(x['prompt'] for x in merged[0]['per_prompt'])}", console)
    return cal
