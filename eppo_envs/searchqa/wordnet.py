"""A real-text corpus from WordNet (Debian's `wordnet-base`): one document per synset, ~117k of them.

We parse the WordNet 3.0 `data.*` files directly (their format is documented in wndb(5)), so no extra Python
package is needed. A document is the synset's words as the title, its gloss, and its hypernyms ("Is a kind of");
questions ask for a word from its definition, for a hypernym, or for the hypernym of a hypernym (two hops).
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from eppo_envs.searchqa.answers import answer_in_text
from eppo_envs.searchqa.corpus import Hop, Question, register_corpus, write_jsonl

WORDNET_DIR = Path(os.environ.get("EPPO_WORDNET_DIR", "/usr/share/wordnet"))
SEED = 20_240_602
QUESTIONS = {"train": 4_000, "test": 500}
MAX_FAMILY = 3  # hypernym-of-hypernym questions only go through parents with at most this many hyponyms
_POS = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}
_MARKER_RE = re.compile(r"\([a-z]+\)$")  # adjective position markers such as "able(a)"


@dataclass(frozen=True)
class Synset:
    key: str  # "n/02084071"
    pos: str
    lemmas: tuple[str, ...]
    definition: str
    examples: str
    hypernyms: tuple[str, ...]  # keys

    @property
    def doc_id(self) -> str:
        return f"wn/{self.key}"

    @property
    def title(self) -> str:
        return f"{', '.join(self.lemmas)} ({_POS_NAME[self.key[0]]})"


_POS_NAME = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}


def parse_line(line: str) -> Synset | None:
    if not line or line.startswith("  "):  # the licence header
        return None
    body, _, gloss = line.partition(" | ")
    fields = body.split()
    offset, pos = fields[0], fields[2]
    n_words = int(fields[3], 16)
    lemmas = tuple(
        dict.fromkeys(_MARKER_RE.sub("", w).replace("_", " ") for w in fields[4 : 4 + 2 * n_words : 2])
    )
    at = 4 + 2 * n_words
    n_ptrs = int(fields[at])
    hypernyms = []
    for i in range(n_ptrs):
        symbol, target, target_pos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
        if symbol in ("@", "@i"):
            hypernyms.append(f"{'a' if target_pos == 's' else target_pos}/{target}")
    gloss = gloss.strip()
    definition, _, examples = gloss.partition('; "')
    key_pos = "a" if pos == "s" else pos
    return Synset(
        f"{key_pos}/{offset}",
        pos,
        lemmas,
        definition.strip(),
        f'"{examples}' if examples else "",
        tuple(hypernyms),
    )


def load_synsets(folder: Path = WORDNET_DIR) -> dict[str, Synset]:
    files = [folder / f"data.{p}" for p in _POS]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(
            f"WordNet data files not found ({', '.join(missing)}); install Debian's "
            "`wordnet-base` (make install does) or set EPPO_WORDNET_DIR"
        )
    synsets: dict[str, Synset] = {}
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                synset = parse_line(line)
                if synset is not None:
                    synsets[synset.key] = synset
    return synsets


def document(s: Synset, synsets: dict[str, Synset]) -> dict:
    # The words open the text as in a dictionary entry; that also ranks a synset's own entry above the entries of
    # its hyponyms, which name it only in their "Is a kind of" line.
    text = f"{', '.join(s.lemmas)}: {s.definition}" + (f"; {s.examples}" if s.examples else "") + "."
    # Each hypernym with the start of its definition: enough to tell its sense apart when searching for it next.
    kinds = [
        f"{', '.join(synsets[h].lemmas)} ({_clip(synsets[h].definition)})"
        for h in s.hypernyms
        if h in synsets
    ]
    if kinds:
        text += " Is a kind of: " + "; ".join(kinds) + "."
    return {"id": s.doc_id, "title": s.title, "text": text}


def _clip(text: str, words: int = 12) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def make_question(
    rng: random.Random,
    s: Synset,
    synsets: dict[str, Synset],
    hyponym_counts: dict[str, int],
    definition_counts: dict[str, int],
) -> tuple[str, tuple, str, list[Hop]] | None:
    sense = f"{s.lemmas[0]}: {s.definition}"
    kind = rng.choices(("define", "hypernym", "hypernym2"), weights=(4, 3, 3))[0]
    if kind == "define":
        # A short or shared definition fits several words (an unfair question, and an ambiguous search).
        if len(s.definition.split()) < 7 or definition_counts[s.definition.lower()] > 1:
            return None
        return (
            f'Which word has this meaning: "{s.definition}"?',
            s.lemmas,
            kind,
            [Hop(s.doc_id, (s.definition,))],
        )
    first = [synsets[h] for h in s.hypernyms if h in synsets]
    if len(first) != 1:
        return None
    parent = first[0]
    if kind == "hypernym":
        question = f'In WordNet, "{s.lemmas[0]}" in the sense "{s.definition}" is a kind of what?'
        return question, parent.lemmas, kind, [Hop(s.doc_id, (sense, s.lemmas[0]))]
    grand = [synsets[h] for h in parent.hypernyms if h in synsets]
    # The second search looks for the parent by its words and definition, which every hyponym's entry repeats:
    # with many hyponyms the parent's own entry can drop out of the top 3, so only small families are asked.
    if not grand or hyponym_counts.get(parent.key, 0) > MAX_FAMILY:
        return None
    question = (
        f'In WordNet, "{s.lemmas[0]}" in the sense "{s.definition}" is a kind of something; '
        "what is that thing a kind of?"
    )
    answers = tuple(dict.fromkeys(lemma for g in grand for lemma in g.lemmas))
    return (
        question,
        answers,
        kind,
        [
            Hop(s.doc_id, (sense, s.lemmas[0])),
            Hop(parent.doc_id, (f"{parent.title} {_clip(parent.definition)}", parent.title)),
        ],
    )


def build(folder: Path, seed: int = SEED) -> None:
    synsets = load_synsets()
    write_jsonl(folder / "docs.jsonl", (document(s, synsets) for s in synsets.values()))
    ordered = list(synsets.values())
    hyponym_counts = Counter(h for s in ordered for h in s.hypernyms)
    definition_counts = Counter(s.definition.lower() for s in ordered)
    rng = random.Random(seed)
    rows = []
    for split, count in QUESTIONS.items():
        pool = [s for i, s in enumerate(ordered) if (i % 10 == 0) == (split == "test")]
        seen: set[str] = set()
        while len(seen) < count:
            made = make_question(rng, rng.choice(pool), synsets, hyponym_counts, definition_counts)
            if made is None or made[0] in seen or answer_in_text(made[1], made[0]):
                continue
            seen.add(made[0])
            text, answers, kind, hops = made
            rows.append(
                Question(
                    f"wordnet/{split}/{len(seen) - 1:05d}", split, text, answers, kind, tuple(hops)
                ).to_json()
            )
    write_jsonl(folder / "questions.jsonl", rows)


register_corpus("wordnet", "v5")(build)
