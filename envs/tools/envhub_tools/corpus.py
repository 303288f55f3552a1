"""The small fictional corpus shipped with the package, and BM25 search over it.

The documents describe invented cities, companies and products, so a model cannot answer from memory:
it has to search. Each document also carries its numbers as structured `facts`, which the task
generator and the oracle read; the agent only ever sees the prose.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Document:
    id: str
    kind: str
    title: str
    text: str
    facts: dict[str, int] = field(default_factory=dict)
    """The numbers stated in `text`, by attribute (hidden from search results)."""
    hq: str | None = None
    maker: str | None = None


class Corpus:
    """Okapi BM25 over title and text, written out here rather than taken from a library.

    Why by hand: for 60 short documents the whole ranker is a dozen lines, and owning them keeps the
    ranking exact and stable (ties go to the earlier document); `rank-bm25`, the usual small choice,
    has had no release since 2022 and would bring numpy along for arithmetic on 60 numbers.
    """

    K1 = 1.5
    B = 0.75

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.by_id = {d.id: d for d in documents}
        self._terms = [Counter(tokens(f"{d.title} {d.text}")) for d in documents]
        self._lengths = [sum(t.values()) for t in self._terms]
        self._avg_length = sum(self._lengths) / len(documents)
        frequency = Counter(term for t in self._terms for term in t)
        n = len(documents)
        # Lucene's idf: always positive, so a term in most documents still counts a little.
        self._idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def of_kind(self, kind: str) -> list[Document]:
        return [d for d in self.documents if d.kind == kind]

    def score(self, query: str, index: int) -> float:
        terms, length = self._terms[index], self._lengths[index]
        total = 0.0
        for term in set(tokens(query)):
            tf = terms.get(term, 0)
            if tf:
                norm = tf + self.K1 * (1 - self.B + self.B * length / self._avg_length)
                total += self._idf[term] * tf * (self.K1 + 1) / norm
        return total

    def search(self, query: str, k: int) -> list[Document]:
        """The `k` best-matching documents, best first; only documents sharing a word with the query."""
        scored = [(self.score(query, i), i) for i in range(len(self.documents))]
        ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
        return [self.documents[i] for _, i in ranked[:k]]


@cache
def load_corpus() -> Corpus:
    """The packaged corpus, read once per process."""
    text = (files("envhub_tools") / "data" / "corpus.jsonl").read_text(encoding="utf-8")
    return Corpus([Document(**json.loads(line)) for line in text.splitlines() if line.strip()])
