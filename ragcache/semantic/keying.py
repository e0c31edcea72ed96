"""What of a question is embedded and what is matched exactly: nothing that reaches the model is ignored.

A sentence embedder reads a fixed window of word pieces (all-MiniLM-L6-v2: 256, special tokens
included) and silently drops the rest, so two long questions that differ only past the window
embed to cosine 1.0. :func:`question_key` decides, from the embedder's own tokenizer, how a
normalised question is keyed:

- ``"embed"``: it fits the window; the whole question is embedded (the usual path).
- ``"split"``: it does not fit, but its last sentence does (a pasted config or log, then the
  ask). Everything before the last sentence (the *head*) is matched **exactly** (its sha256 is
  folded into the partition digest, so only entries with the same head are ever candidates) and
  the last sentence alone is embedded. Two long questions with the same paste and a reworded ask
  still hit; any difference in the paste is a different partition.
- ``"exact"``: not even the last sentence fits; only the same whole text (sha256 of the
  normalised question, case and punctuation kept) is served.

Guards always see the whole question, in every mode.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragcache.semantic.partition import PartitionKey

if TYPE_CHECKING:
    from ragcache.semantic.embedding import QuestionEmbedder

_SENTENCE_END = re.compile(r"(?<=[.?!;:])\s+(?=\S)")


@dataclass(frozen=True, slots=True)
class QuestionKey:
    """How one normalised question is keyed.

    Attributes:
        text: the whole normalised question (stored, shown to guards, used for exact matching).
        embed_text: the part that is embedded (``text`` in ``"embed"`` mode, the last sentence in
            ``"split"`` mode, ``text`` in ``"exact"`` mode, where the vector is only stored).
        head: the exactly matched part before ``embed_text`` (``""`` unless ``"split"``).
        partition: the partition searched and written (the caller's, or one derived from it).
        mode: ``"embed"``, ``"split"`` or ``"exact"``.
        tokens: the embedder's token count of ``text`` (special tokens included).
    """

    text: str
    embed_text: str
    head: str
    partition: PartitionKey
    mode: str
    tokens: int

    @property
    def exact_only(self) -> bool:
        return self.mode == "exact"

    def with_tail(self, tail: str) -> QuestionKey:
        """The same key with the embedded part replaced (typo correction of the ask)."""
        if self.mode != "split":
            return QuestionKey(tail, tail, "", self.partition, self.mode, self.tokens)
        return QuestionKey(f"{self.head} {tail}", tail, self.head, self.partition, self.mode, self.tokens)


def last_sentence(text: str) -> tuple[str, str]:
    """Split ``text`` into (everything before the last sentence, the last sentence).

    Sentences end at ``. ? ! ; :`` followed by whitespace. A text of one sentence gives ``("", text)``.
    """
    parts = _SENTENCE_END.split(text.strip())
    if len(parts) == 1:
        return "", parts[0]
    tail = parts[-1]
    return text[: len(text) - len(tail)].strip(), tail


def derived_partition(pk: PartitionKey, mode: str, exact_text: str) -> PartitionKey:
    """A partition digest that also covers ``exact_text`` (same namespace and documents, so
    ``clear(namespace)`` and ``invalidate(document)`` reach it).

    This is question keying, not a request's partition: it starts from the key the request already
    has (:func:`ragcache.request.request_partition`, received by the semantic cache) and narrows it to
    the part of a long question the embedder cannot read (the head of a ``"split"`` question, or the
    whole ``"exact"`` one), so that part is matched byte for byte. It reads no request field; only the
    cache knows the embedder's window, so it stays here.
    """
    h = hashlib.sha256()
    for part in (pk.digest, mode, exact_text):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return PartitionKey(h.hexdigest(), pk.namespace, pk.documents, pk.document_ids)


def question_key(text: str, partition: PartitionKey, embedder: QuestionEmbedder) -> QuestionKey:
    """Key a normalised question for ``embedder`` (see the module docstring for the three modes)."""
    n = embedder.count_tokens(text)
    window = embedder.window
    if n <= window:
        return QuestionKey(text, text, "", partition, "embed", n)
    head, tail = last_sentence(text)
    if head and embedder.count_tokens(tail) <= window:
        return QuestionKey(text, tail, head, derived_partition(partition, "split", head), "split", n)
    return QuestionKey(text, text, "", derived_partition(partition, "exact", text), "exact", n)
