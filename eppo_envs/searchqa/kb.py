"""A generated knowledge base of fictional people, cities, regions, organisations and works, with questions.

Every name is invented from syllables, so no language model can know a fact about it: the answer must be
searched for. Each entity has one document stating its relations; a question follows a chain of 1-3 relations
(e.g. work -> creator -> birthplace -> region), and each hop needs the document of the entity reached so far.
Test questions start from entities that no training question starts from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from eppo_envs.searchqa.answers import answer_in_text
from eppo_envs.searchqa.corpus import Hop, Question, register_corpus, write_jsonl

SEED = 20_240_601
SIZES = {"region": 60, "city": 3_000, "org": 3_000, "person": 6_000, "work": 8_000}  # 20,060 documents
QUESTIONS = {"train": 5_000, "test": 500}

_ONSETS = "b br c d dr f g gr h k kr l m n p qu r s st t th tr v z".split()
_VOWELS = "a e i o u ae ei ou y".split()
_CODAS = ["", "", "", "l", "n", "r", "s", "th", "v", "x", "m", "nd", "rt"]
_CITY_ENDS = "moor holm wick stead ford vale mere gard thorpe haven".split()
_REGION_ENDS = "mark land reach shire march".split()
_ORG_KINDS = "Institute Guild Company Society Foundry Press Studio Academy Trust Consortium".split()
_OCCUPATIONS = "chemist sculptor cartographer composer engineer botanist poet architect astronomer weaver".split()
_WORK_KINDS = {"novel": "written", "film": "directed", "symphony": "composed", "painting": "painted", "play": "written"}
_WORK_NOUNS = "Orchard Lantern Harbour Winter Mirror Garden Tide Crown River Ember Falcon Bridge Silence Voyage".split()


@dataclass
class Entity:
    kind: str
    name: str
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def doc_id(self) -> str:
        return f"kb/{self.kind}/{self.name.lower().replace(' ', '_')}"


class _Names:
    """Unique invented words: no two entities share a name, and names never repeat across kinds."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def word(self, syllables: int, end: str = "") -> str:
        while True:
            w = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                        for _ in range(syllables)) + end
            if w not in self.used and len(w) > 3:
                self.used.add(w)
                return w.capitalize()


def generate(seed: int = SEED) -> dict[str, list[Entity]]:
    rng = random.Random(seed)
    names = _Names(rng)
    regions = [Entity("region", names.word(2, rng.choice(_REGION_ENDS))) for _ in range(SIZES["region"])]
    cities = [Entity("city", names.word(2, rng.choice(_CITY_ENDS)),
                     {"region": rng.choice(regions), "founded": rng.randint(800, 1700)}) for _ in range(SIZES["city"])]
    for region in regions:
        region.facts["capital"] = rng.choice([c for c in cities if c.facts["region"] is region] or cities)
    people = [Entity("person", f"{names.word(2)} {names.word(2)}",
                     {"occupation": rng.choice(_OCCUPATIONS), "born": rng.randint(1800, 1990),
                      "born_in": rng.choice(cities)}) for _ in range(SIZES["person"])]
    orgs = [Entity("org", f"{names.word(2)} {rng.choice(_ORG_KINDS)}",
                   {"founded": rng.randint(1700, 1990), "hq": rng.choice(cities), "founder": rng.choice(people)})
            for _ in range(SIZES["org"])]
    for person in people:
        person.facts["employer"] = rng.choice(orgs)
    works = []
    for _ in range(SIZES["work"]):
        kind = rng.choice(list(_WORK_KINDS))
        title = f"The {rng.choice(_WORK_NOUNS)} of {names.word(2)}"
        works.append(Entity("work", title, {"type": kind, "year": rng.randint(1850, 2020),
                                            "creator": rng.choice(people), "publisher": rng.choice(orgs)}))
    return {"region": regions, "city": cities, "person": people, "org": orgs, "work": works}


def document(e: Entity) -> dict:
    """The entity's article. The name is repeated (as in real encyclopaedias) so a search for it ranks it first."""
    f, n = e.facts, e.name
    if e.kind == "region":
        text = f"{n} is a region. The capital of {n} is the city of {f['capital'].name}."
    elif e.kind == "city":
        text = (f"{n} is a city in the region of {f['region'].name}. {n} was founded in {f['founded']}. "
                f"The city of {n} is known for its markets.")
    elif e.kind == "person":
        text = (f"{n} (born {f['born']}) is a {f['occupation']}. {n} was born in {f['born_in'].name}. "
                f"{n.split()[1]} worked for the {f['employer'].name}.")
    elif e.kind == "org":
        text = (f"The {n} is an organisation founded in {f['founded']} by {f['founder'].name}. "
                f"The {n} is headquartered in {f['hq'].name}.")
    else:
        verb = _WORK_KINDS[f["type"]]
        text = (f"{n} is a {f['type']} from {f['year']}, {verb} by {f['creator'].name}. "
                f"{n} was published by the {f['publisher'].name}.")
    return {"id": e.doc_id, "title": n, "text": text}


# A relation: (fact key, phrase used in questions, keyword in the subject's document that sharpens the query)
_RELATIONS = {
    "work": {"creator": "the creator of the {type} {name}", "publisher": "the publisher of the {type} {name}"},
    "person": {"born_in": "the birthplace of {name}", "employer": "the employer of {name}"},
    "org": {"founder": "the founder of the {name}", "hq": "the headquarters city of the {name}"},
    "city": {"region": "the region of the city of {name}"},
}
_KEYWORDS = {"creator": "by", "publisher": "published", "born_in": "born", "employer": "worked",
             "founder": "founded", "hq": "headquartered", "region": "region"}
_FINAL = {  # the last hop may also ask for a literal fact of the entity reached
    "person": {"born": "the birth year of {name}", "occupation": "the occupation of {name}"},
    "org": {"founded": "the founding year of the {name}"},
    "city": {"founded": "the founding year of the city of {name}"},
    "work": {"year": "the year of the {type} {name}"},
}


def _phrase(template: str, e: Entity) -> str:
    return template.format(name=e.name, type=e.facts.get("type", ""))


def make_question(rng: random.Random, start: Entity, hops: int) -> tuple[str, str, str, list[Hop]] | None:
    """Walk `hops` relations from `start`; return (question, answer, kind, supporting hops) or None."""
    chain, entity = [], start
    for step in range(hops):
        options = list(_RELATIONS.get(entity.kind, {}).items())
        if step == hops - 1:
            options += list(_FINAL.get(entity.kind, {}).items())
        if not options:
            return None
        key, template = rng.choice(options)
        chain.append((entity, key, template))
        value = entity.facts[key]
        if not isinstance(value, Entity):
            break  # a literal fact ends the chain
        entity = value
    if len(chain) != hops:
        return None
    final_key = chain[-1][1]
    answer = chain[-1][0].facts[final_key]
    who = isinstance(answer, Entity) and answer.kind == "person"
    text = f"{'Who' if who else 'What'} is {_describe(chain)}?"
    supports = [Hop(subject.doc_id, (f"{subject.name} {_KEYWORDS.get(key, '')}".strip(), subject.name))
                for subject, key, _ in chain]
    kind = f"{start.kind}." + ".".join(key for _, key, _ in chain)
    return text[0].upper() + text[1:], answer.name if isinstance(answer, Entity) else str(answer), kind, supports


def _describe(chain: list[tuple[Entity, str, str]]) -> str:
    """Nest the relation phrases: only the starting entity is named; later ones are described through it."""
    described = _phrase(chain[0][2], chain[0][0])
    for _subject, _key, template in chain[1:]:
        head = template.split("{name}")[0].replace("{type} ", "").replace("the city of ", "").rstrip()
        described = f"{head} {described}".replace("the the ", "the ")
    return described


def build(folder: Path, seed: int = SEED) -> None:
    entities = generate(seed)
    write_jsonl(folder / "docs.jsonl", (document(e) for kind in SIZES for e in entities[kind]))
    rng = random.Random(seed + 1)
    starts = entities["work"] + entities["person"] + entities["org"] + entities["city"]
    rows = []
    for split, count in QUESTIONS.items():
        # Entities are split by position: test questions start from every tenth entity, training ones from the rest.
        pool = [e for i, e in enumerate(starts) if (i % 10 == 0) == (split == "test")]
        seen: set[str] = set()
        while len([r for r in rows if r["split"] == split]) < count:
            made = make_question(rng, rng.choice(pool), rng.choices((1, 2, 3), weights=(4, 4, 2))[0])
            if made is None or made[0] in seen or answer_in_text([made[1]], made[0]):
                continue
            seen.add(made[0])
            text, answer, kind, hops = made
            index = len(seen) - 1
            rows.append(Question(f"kb/{split}/{index:05d}", split, text, (answer,), kind, tuple(hops)).to_json())
    write_jsonl(folder / "questions.jsonl", rows)


register_corpus("kb", "v1")(build)
