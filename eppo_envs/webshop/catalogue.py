"""The shop's data: products and instructions (goals), generated deterministically or loaded from WebShop's files.

A generated catalogue is built once into the cache (`eppo_envs.core.cache`) and read back as one JSON file; the
same `(num_products, num_goals, seed)` always gives byte-identical products, goals and splits.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from eppo_envs.core.cache import cached_dir
from eppo_envs.webshop import vocab

CATALOGUE_VERSION = 1
PRICE_STEPS = [10.0 * i for i in range(1, 100)]  # WebShop's PRICE_RANGE for price caps


@dataclass
class Product:
    asin: str
    title: str
    price: float
    query: str  # the product type's search query (WebShop's `query` field, part of the type reward)
    product_category: str  # "A > B > C" (generated) or "A › B › C" (WebShop's files)
    attributes: list[str]
    options: dict[str, list[str]]  # dimension -> selectable values, in display order
    description: str
    features: list[str]
    reviews: list[dict] = field(default_factory=list)  # {"score": int, "title": str, "body": str}
    rating: str = "N.A."

    @property
    def price_tag(self) -> str:
        return f"${self.price:.2f}"


@dataclass
class Goal:
    goal_id: str
    asin: str  # the product the instruction was written for (one of possibly many that satisfy it)
    instruction: str
    attributes: list[str]
    options: dict[str, str]  # dimension -> wanted value (names may be "" when the source does not give them)
    price_upper: float
    query: str
    name: str  # the target product's title (WebShop's goal `name`, used for the noun overlap)
    product_category: str


@dataclass
class Catalogue:
    source: str  # "generated-..." or the path of the WebShop file
    products: list[Product]
    goals: dict[str, list[Goal]]  # split -> goals
    type_words: frozenset[str]  # the nouns that name product types (see reward.nouns)

    @cached_property
    def by_asin(self) -> dict[str, Product]:
        return {p.asin: p for p in self.products}

    def to_json(self) -> dict:
        return {
            "version": CATALOGUE_VERSION,
            "source": self.source,
            "products": [asdict(p) for p in self.products],
            "goals": {split: [asdict(g) for g in goals] for split, goals in self.goals.items()},
            "type_words": sorted(self.type_words),
        }

    @classmethod
    def from_json(cls, data: dict) -> Catalogue:
        return cls(
            source=data["source"],
            products=[Product(**p) for p in data["products"]],
            goals={split: [Goal(**g) for g in goals] for split, goals in data["goals"].items()},
            type_words=frozenset(data["type_words"]),
        )


def price_cap(price: float, rng: random.Random) -> float:
    """WebShop's rule: the larger of two of the four round prices just above the product's price."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return 1_000_000.0
    return max(rng.sample(above, 2))


# ----------------------------------------------------------------------------------------- generation
def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(vocab.BRAND_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _title_case(text: str) -> str:
    return " ".join(w if any(c.isdigit() for c in w) else w.capitalize() for w in text.split())


def _make_product(index: int, ptype: vocab.ProductType, rng: random.Random) -> Product:
    brand = _brand(rng)
    attributes = rng.sample(list(ptype.attributes), rng.randint(3, min(5, len(ptype.attributes))))
    in_title = attributes[: rng.randint(1, 2)]
    title = f"{brand} {_title_case(' '.join(in_title))} {_title_case(ptype.name)}, {rng.choice(vocab.TITLE_EXTRAS)}"
    options = {}
    for dim, values in ptype.options:
        picked = set(rng.sample(range(len(values)), rng.randint(2, len(values))))
        options[dim] = [v for i, v in enumerate(values) if i in picked]
    low, high = ptype.price
    price = round(rng.uniform(low, high), 2)
    features = [f"{_title_case(a)}: this {ptype.name} is {a}, tested by our team." for a in attributes]
    features.append(f"What you get: one {ptype.name} from {brand}, with a 30-day return policy.")
    description = (f"The {brand} {ptype.name} is {', '.join(attributes[:-1])} and {attributes[-1]}. "
                   f"Designed for daily use and made to last; see the features for details.")
    reviews = []
    for score, template in rng.sample(vocab.REVIEW_TEMPLATES, 3):
        body = template.format(type=ptype.name, attr=rng.choice(attributes))
        reviews.append({"score": score, "title": body.split(".")[0][:40], "body": body})
    rating = f"{sum(r['score'] for r in reviews) / len(reviews):.1f}"
    return Product(
        asin=f"B{index:09d}", title=title, price=price, query=ptype.name, product_category=ptype.category,
        attributes=attributes, options=options, description=description, features=features, reviews=reviews,
        rating=rating,
    )


_TEMPLATES = (
    "i need {a} {type}{opts}, and price lower than {cap} dollars",
    "i am looking for a {type} that is {attrs}{opts}, and price lower than {cap} dollars",
    "find me {a} {type}{opts}, under {cap} dollars",
    "i want to buy a {type} which is {attrs}{opts}, and price lower than {cap} dollars",
    "looking for a {type} that is {attrs}{opts}; it should cost less than {cap} dollars",
)


def _make_goal(goal_id: str, product: Product, rng: random.Random) -> Goal:
    attributes = rng.sample(product.attributes, min(len(product.attributes), rng.choice((1, 2, 2, 3, 3))))
    options = {dim: rng.choice(values) for dim, values in product.options.items()}
    cap = price_cap(product.price, rng)
    opts = "".join(f", {dim}: {value}" if rng.random() < 0.5 else f", in {value} {dim}" for dim, value in options.items())
    attrs = " and ".join(attributes)
    text = rng.choice(_TEMPLATES).format(a=attrs, type=product.query, attrs=attrs, opts=opts, cap=f"{cap:.2f}")
    return Goal(goal_id, product.asin, re.sub(r"\s+", " ", text), attributes, options, cap, product.query,
                product.title, product.product_category)


def generate(num_products: int = 10_400, num_goals: int = 6_000, num_test: int = 1_000, seed: int = 0) -> Catalogue:
    """Products spread evenly over the types of `vocab`, then goals for a random sample of them."""
    rng = random.Random(seed)
    types = vocab.PRODUCT_TYPES
    order = [types[i % len(types)] for i in range(num_products)]
    rng.shuffle(order)  # interleave types so asin order carries no signal
    products = [_make_product(i, ptype, rng) for i, ptype in enumerate(order)]
    targets = rng.sample(products, min(num_goals, len(products)))
    goals = [_make_goal(f"g{i:05d}", p, rng) for i, p in enumerate(targets)]
    type_words = frozenset(w for t in types for w in t.nouns)
    num_test = min(num_test, max(1, len(goals) // 5))  # a small catalogue still gets a train split
    return Catalogue(f"generated-v{CATALOGUE_VERSION}-n{num_products}-g{num_goals}-s{seed}", products,
                     {"test": goals[:num_test], "train": goals[num_test:]}, type_words)


def generated_catalogue(num_products: int = 10_400, num_goals: int = 6_000, seed: int = 0) -> tuple[Catalogue, Path]:
    """The generated catalogue from the cache (built on first use) and its cache folder."""
    name = f"webshop/generated-v{CATALOGUE_VERSION}-n{num_products}-g{num_goals}-s{seed}"

    def build(tmp: Path) -> None:
        catalogue = generate(num_products, num_goals, seed=seed)
        (tmp / "catalogue.json").write_text(json.dumps(catalogue.to_json()))

    folder = cached_dir(name, build)
    return Catalogue.from_json(json.loads((folder / "catalogue.json").read_text())), folder
