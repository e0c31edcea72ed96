"""The answer store the settings point at, for ``ragcache cache``: :func:`open_answers`.

Every operation (list, show, stats, remove, evict, clear) is the store's own, through its admin view
(:class:`~ragcache.semantic.stores.admin.AnswerAdmin`), named by its row of
:data:`ragcache.store_kinds.ANSWER_STORES`: the embedded folder
(:class:`~ragcache.semantic.stores.folder_admin.FolderAnswers`) or PostgreSQL
(:class:`~ragcache.semantic.stores.pg_admin.PgAnswers`). None loads an embedder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragcache.store_kinds import answer_store_kind, load

if TYPE_CHECKING:
    from ragcache.semantic.stores.admin import AnswerAdmin


def open_answers(cfg: Any) -> AnswerAdmin:
    """The admin view of the answer store the settings point at: the store ``cfg.semantic_url`` names
    (``postgresql://...``, or a folder: ``file://DIR`` or a path), else the folder ``cfg.answers_dir``:
    where ``ragcache ask`` and the adapters keep answers.

    Raises:
        ValueError: ``cfg.semantic_url`` has a scheme :data:`ragcache.store_kinds.ANSWER_STORES` does not list.
    """
    url = cfg.semantic_url
    kind = answer_store_kind(url or "", "RAGCACHE_SEMANTIC_URL")
    admin = load(kind.admin)
    if not url:
        return admin(cfg.answers_dir)
    return admin(url.removeprefix("file://") if kind.folder else url)


__all__ = ["open_answers"]
