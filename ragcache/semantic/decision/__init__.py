"""The semantic cache's decision: whether a stored answer may be served for a new question.

:mod:`~ragcache.semantic.decision.policy` (:class:`~ragcache.semantic.SemanticPolicy`, the whole decision
over any vector-answer store); the guards against false hits (:mod:`.guards`, :mod:`.meaning_guards`,
:mod:`.order_guards`, :mod:`.qtype`, with :mod:`.lexicon` and :mod:`.speller`); the learned verifier
(:mod:`.verifier`, :mod:`.features`, :mod:`.calibration`); the user-set error bound ``max_error``
(:mod:`.bound`, :mod:`.vcache`); what a truncated answer allows (:mod:`.budget`); argument checks
(:mod:`.checks`). Nothing here keeps entries: that is :mod:`ragcache.semantic.stores`.
"""
