"""WebShop's reward, as the original (`web_agent_site/engine/goal.py`) computes it; see DESIGN.md.

    R = (n_att + n_opt + [price <= cap]) / (|A| + |O| + 1) * r_type

The original tags nouns with spaCy's large model; here a product name's nouns are its words that name product
types in the catalogue (`Catalogue.type_words`), which is exact for the generated catalogue. Unlike the original
the total is capped at 1.0: the original counts matches over the *purchased* options, so a product with more option
dimensions than the goal could score above 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rapidfuzz import fuzz

from eppo_envs.webshop.catalogue import Goal, Product

EXACT_MATCH_OPTIONS = ("size",)
FUZZY_THRESHOLD = 85
_COLOURS = ("black", "white", "gray", "grey", "red", "blue", "green", "yellow", "pink", "purple", "orange", "brown",
            "beige", "navy", "gold", "silver", "teal", "burgundy", "clear")
_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")


@dataclass(frozen=True)
class RewardInfo:
    reward: float
    r_type: float
    n_attributes: int
    n_options: int
    price_ok: bool
    title_score: float
    query_match: bool
    category_match: bool


def normalize_color(value: str) -> str:
    """WebShop maps a colour option onto the base colour it names ("navy blue" and "blue" compare equal)."""
    value = value.lower().strip()
    words = value.split()
    for colour in _COLOURS:
        if colour in words:
            return "gray" if colour == "grey" else colour
    return value


def nouns(text: str, type_words: frozenset[str]) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w in type_words}


def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.features).lower(), product.description.lower()


def type_reward(product: Product, goal: Goal, type_words: frozenset[str]) -> tuple[float, float, bool, bool]:
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split(">")}
    wanted = {x.strip() for x in goal.product_category.split(">")}
    category_match = len(bought & wanted) >= 2
    desired = nouns(goal.name, type_words)
    title_score = len(nouns(product.title, type_words) & desired) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score, query_match, category_match


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    texts = _product_text(product)
    count = 0
    for wanted in goal_attributes:
        if any(fuzz.token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            count += 1
        elif any(wanted.lower() in t for t in texts):
            count += 1
    return count


def option_matches(product: Product, goal_options: Iterable[str], chosen: Mapping[str, str]) -> int:
    """Chosen options (dimension -> value) that match a goal option: exactly for sizes, fuzzily otherwise."""
    wanted = [normalize_color(v) for v in goal_options]
    texts = _product_text(product)
    count = 0
    for dim, value in chosen.items():
        value = normalize_color(value)
        if dim.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(fuzz.token_set_ratio(g, value) > FUZZY_THRESHOLD for g in wanted)
        if matched or any(value in t for t in texts):
            count += 1
    return count


def compute_reward(product: Product, goal: Goal, chosen: Mapping[str, str], type_words: frozenset[str],
                   price: float | None = None) -> RewardInfo:
    price = product.price if price is None else price
    r_type, title_score, query_match, category_match = type_reward(product, goal, type_words)
    n_att = attribute_matches(product, goal.attributes)
    n_opt = option_matches(product, goal.options.values(), chosen)
    price_ok = price <= goal.price_upper if goal.price_upper > 0 else True
    total = (n_att + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1) * r_type
    return RewardInfo(min(total, 1.0), r_type, n_att, n_opt, price_ok, title_score, query_match, category_match)
