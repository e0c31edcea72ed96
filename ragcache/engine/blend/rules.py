"""KV selection rules: which reused document tokens a blended prefill recomputes, in one table.

A blended prefill (:func:`ragcache.engine.blend.blend_prefill`) keeps most document tokens' cached KV
and recomputes the ones its *KV selection rule* ranks first: the top ``ceil(r * n_doc)`` document
tokens, plus every uncached token and the last one. Every rule is a class here, and
:data:`SELECTION_RULES` maps each rule's name to it; the name is what ``rank_by`` takes everywhere
(``blend_prefill(rank_by=...)``, :class:`~ragcache.engine.blend.setting.BlendSetting`,
``EngineConfig(rank_by=...)``, ``ragcache calibrate --rank-by``, ``ragcache bench blend --rank-by``,
the calibration records). Validation, the command-line help and the benchmarks read this table, so a
new rule is one class plus one line in it (and its test; see the docs' design page
*Adding a store or a KV selection rule*).

A rule ranks at one of two stages:

- :class:`CheckLayerRule` (``stage = "check_layer"``): layers ``0 .. check_layer`` run over every
  token, then the rule scores each position from the fresh-vs-cached KV deviation at the check layer
  (CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §4.2) and, when it asks, the attention mass
  the question puts on each key there (:func:`ragcache.engine.blend.hkvd.tail_attention`). Gradual
  filtering (§4.3) narrows the set over the next layers by deviation.
- :class:`BeforeLayersRule` (``stage = "before_layers"``): the rule scores every position before layer
  0 (from a first pass of the question over the reused KV, from a seed, or from given scores); the
  chosen tokens are then recomputed at every layer (dual stage, :mod:`ragcache.engine.blend.selection`),
  and the budget options ``doc_top`` / ``mass_bound`` / ``max_share`` apply.

A rule with ``reads_question = True`` ranks by the tokens after the last document, so a prompt that
ends with a document is refused for it (the engine then falls back to ``"deviation"``); one with
``serving = False`` needs inputs only a benchmark has and cannot be an engine's or a setting's rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:  # the table is read without torch (the command-line help): tensors are imported where used
    import torch

    from ragcache.engine.rope import RopeSpec

Stage = Literal["check_layer", "before_layers"]


class SelectionRule:
    """Base of every KV selection rule: its name, its one-line summary and what it needs.

    Attributes:
        name: the key in :data:`SELECTION_RULES` (the value of ``rank_by``).
        summary: one line for the command-line help, the docs and error messages.
        stage: ``"check_layer"`` or ``"before_layers"`` (module doc).
        reads_question: ranks by the tokens after the last document (the question).
        serving: may be an engine's or a blend setting's rule (``False``: benchmarks only).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    stage: ClassVar[Stage]
    reads_question: ClassVar[bool] = False
    serving: ClassVar[bool] = True


class CheckLayerRule(SelectionRule):
    """A rule that scores the positions after the prefix at the check layer."""

    stage: ClassVar[Stage] = "check_layer"

    def score(self, deviation: torch.Tensor, tail_mass: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Float ``[m]`` scores of the ``m`` positions after the prefix (higher: recomputed first).

        Args:
            deviation: float32 ``[m]`` squared fresh-vs-cached KV deviation at the check layer.
            tail_mass: computes (only when called) the float32 ``[m]`` attention mass the tokens after
                the last document put on each position at the check layer.
        """
        raise NotImplementedError


@dataclass(slots=True)
class RankInputs:
    """What a :class:`BeforeLayersRule` may read: the prompt and its fused KV before layer 0.

    Attributes:
        model: the causal LM.
        ids: int64 ``[n]`` prompt ids on the model's device.
        doc_mask: bool ``[n]``, True at reused document tokens.
        tail_from: the first position after the last document (the question starts there).
        seed: the random rule's seed.
        token_scores: caller-given float ``[n]`` scores or ``None``.
        query_layers: the layers a question pass fuses (``None``: all).
        spec / k_all / v_all / uncached: the RoPE spec, the fused per-layer K/V buffers ``[1, Hkv, n, D]``
            and the sorted int64 positions without cached KV after the prefix (read by :meth:`question_pass`).
    """

    model: Any
    ids: torch.Tensor
    doc_mask: torch.Tensor
    tail_from: int
    seed: int
    token_scores: torch.Tensor | None
    query_layers: Sequence[int] | None
    spec: RopeSpec
    k_all: list
    v_all: list
    uncached: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.doc_mask.shape[0])

    def question_pass(self, layer_weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Stage 1 of the dual-stage pipeline (:func:`ragcache.engine.blend.selection.query_scores`): the
        uncached tokens and the last one run over the reused KV; float32 ``[n]`` scores, each fused layer's
        ``layer_weights(probs [H, m, n_keys], v [Hkv, n_keys, D]) -> [n_keys]`` normalised over the documents."""
        import torch

        from ragcache.engine.blend.selection import query_scores

        pos = self.uncached
        if len(pos) == 0 or pos[-1] != self.n - 1:
            pos = torch.cat([pos, torch.tensor([self.n - 1], device=self.ids.device)]).unique()
        cos, sin = (t.to(self.ids.device) for t in self.spec.cos_sin(pos))
        return query_scores(self.model, self.ids, pos, self.tail_from, cos, sin, self.k_all, self.v_all,
                            self.doc_mask.to(self.ids.device), layer_weights, self.query_layers)


class BeforeLayersRule(SelectionRule):
    """A rule that scores every position before layer 0."""

    stage: ClassVar[Stage] = "before_layers"

    def score(self, inputs: RankInputs) -> torch.Tensor:
        """Float ``[n]`` scores of every prompt position (only document positions matter; higher first)."""
        raise NotImplementedError


# -- the rules ------------------------------------------------------------------------------------------
class DeviationRule(CheckLayerRule):
    """CacheBlend §4.2: the K+V (or K / V) deviation between fresh and cached KV at the check layer."""

    name = "deviation"
    summary = "CacheBlend: fresh-vs-cached KV deviation at the check layer"

    def score(self, deviation: torch.Tensor, tail_mass: Callable[[], torch.Tensor]) -> torch.Tensor:
        return deviation


class DeviationTimesAttentionRule(CheckLayerRule):
    """The deviation weighted by the question's attention mass at the check layer (after Cache-Craft)."""

    name = "deviation*attention"
    summary = "deviation times the question's attention mass at the check layer"
    reads_question = True

    def score(self, deviation: torch.Tensor, tail_mass: Callable[[], torch.Tensor]) -> torch.Tensor:
        return deviation * tail_mass()


class AttentionRule(CheckLayerRule):
    """The question's attention mass at the check layer alone."""

    name = "attention"
    summary = "the question's attention mass at the check layer"
    reads_question = True

    def score(self, deviation: torch.Tensor, tail_mass: Callable[[], torch.Tensor]) -> torch.Tensor:
        return tail_mass()


class ProphetRule(BeforeLayersRule):
    """ProphetKV (arXiv 2602.02579): the question's attention probability, fused over layers."""

    name = "prophet"
    summary = "query-aware: the question's attention over the reused tokens, fused over layers"
    reads_question = True

    def score(self, inputs: RankInputs) -> torch.Tensor:
        return inputs.question_pass(lambda probs, v: probs.mean(dim=(0, 1)))


class InfoFlowRule(BeforeLayersRule):
    """InfoFlow KV (arXiv 2603.05353): the attention norm ``alpha_qj * ||v_j||`` per head, fused over layers."""

    name = "infoflow"
    summary = "query-aware, the default: the question's attention times value norm, fused over layers"
    reads_question = True

    def score(self, inputs: RankInputs) -> torch.Tensor:
        def weights(probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            vnorm = v.float().norm(dim=-1).repeat_interleave(probs.shape[0] // v.shape[0], dim=0)  # [H, n]
            return (probs * vnorm[:, None, :]).mean(dim=(0, 1))

        return inputs.question_pass(weights)


class RandomRule(BeforeLayersRule):
    """Uniform random document tokens from ``seed``: the baseline any rule must beat."""

    name = "random"
    summary = "seeded random tokens, a baseline"

    def score(self, inputs: RankInputs) -> torch.Tensor:
        from ragcache.engine.blend.selection import random_scores

        return random_scores(inputs.n, inputs.seed, device=inputs.ids.device)


class GivenRule(BeforeLayersRule):
    """Caller-given ``token_scores`` (e.g. :func:`~ragcache.engine.blend.selection.oracle_scores`)."""

    name = "given"
    summary = "caller-given token_scores (benchmarks: the oracle)"
    serving = False

    def score(self, inputs: RankInputs) -> torch.Tensor:
        n, given = inputs.n, inputs.token_scores
        if given is None or tuple(given.shape) != (n,):
            raise ValueError(f"rank_by='given' needs token_scores of shape ({n},); got "
                             f"{None if given is None else tuple(given.shape)}")
        return given.to(inputs.ids.device).float()


SELECTION_RULES: dict[str, type[SelectionRule]] = {
    "deviation": DeviationRule,
    "deviation*attention": DeviationTimesAttentionRule,
    "attention": AttentionRule,
    "prophet": ProphetRule,
    "infoflow": InfoFlowRule,
    "random": RandomRule,
    "given": GivenRule,
}
"""Every KV selection rule by name (the value of ``rank_by``): the one table validation, the
command-line help, the benchmarks and the docs read. Add a rule here."""


def selection_rule(name: str) -> SelectionRule:
    """The rule named ``name`` (an instance).

    Raises:
        ValueError: an unknown name (the message lists every rule).
    """
    cls = SELECTION_RULES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"rank_by must be one of {list(SELECTION_RULES)}; got {name!r}")
    return cls()


def serving_rules() -> list[str]:
    """Names of the rules an engine or a blend setting may use (``serving``), in table order."""
    return [name for name, cls in SELECTION_RULES.items() if cls.serving]


def check_serving_rule(name: Any, what: str = "rank_by") -> str:
    """``name`` when it names a serving rule.

    Raises:
        ValueError: not a serving rule (the message names ``what`` and lists the serving rules).
    """
    if not isinstance(name, str) or name not in SELECTION_RULES or not SELECTION_RULES[name].serving:
        raise ValueError(f"{what} must be one of {serving_rules()}; got {name!r}")
    return name


def rules_help(serving_only: bool = True) -> str:
    """``"name (summary); ..."`` of the rules, for command-line help."""
    return "; ".join(f"{n} ({c.summary})" for n, c in SELECTION_RULES.items() if c.serving or not serving_only)


def register_rule(cls: type[SelectionRule]) -> type[SelectionRule]:
    """Add a rule class to :data:`SELECTION_RULES` (a plug-in's or a test's rule; in-tree rules are a line
    of the table). Returns ``cls``, so it works as a class decorator.

    Raises:
        TypeError: ``cls`` is not a :class:`CheckLayerRule` or :class:`BeforeLayersRule` subclass.
        ValueError: no ``name``, or the name is taken by another class.
    """
    if not (isinstance(cls, type) and issubclass(cls, CheckLayerRule | BeforeLayersRule)):
        raise TypeError(f"a selection rule subclasses CheckLayerRule or BeforeLayersRule; got {cls!r}")
    if not cls.name or not isinstance(cls.name, str):
        raise ValueError(f"{cls.__name__} needs a name (the value of rank_by)")
    if SELECTION_RULES.get(cls.name, cls) is not cls:
        raise ValueError(f"selection rule {cls.name!r} is already {SELECTION_RULES[cls.name].__name__}")
    SELECTION_RULES[cls.name] = cls
    return cls


def unregister_rule(name: str) -> None:
    """Remove a rule added with :func:`register_rule` (no error when absent)."""
    SELECTION_RULES.pop(name, None)


__all__ = ["SELECTION_RULES", "AttentionRule", "BeforeLayersRule", "CheckLayerRule", "DeviationRule",
           "DeviationTimesAttentionRule", "GivenRule", "InfoFlowRule", "ProphetRule", "RandomRule", "RankInputs",
           "SelectionRule",
           "check_serving_rule", "register_rule", "rules_help", "selection_rule", "serving_rules", "unregister_rule"]
