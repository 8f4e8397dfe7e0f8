"""WebShop's reward, as the original (`web_agent_site/engine/goal.py`, `get_reward`) computes it:

    R = (n_att + n_opt + [price <= cap]) / (|A| + |O| + 1) * r_type

- n_att: goal attributes matched by a product attribute (fuzzy), else found as a substring of the product's
  title, features or description (lower-cased);
- n_opt: goal options matched (fuzzy) by any chosen option value, both colour-normalised; one per goal option,
  so n_opt <= |O|, and no text fallback (a "blue" goal is not met by a red speaker whose title says "Bluetooth");
- r_type: 1, 0.5, 0.1 or 0 from query equality, category-path overlap and the overlap of nouns in the names.

Fuzzy means thefuzz's `token_set_ratio(a, b) > 85` as the original scores it: both strings lower-cased, stripped
of characters U+0080-U+00FF (thefuzz's `force_ascii`) and of punctuation, the ratios difflib's (thefuzz 0.19
without python-Levenshtein, as WebShop installs it) and rounded to integers.
The one deliberate difference: the original tags nouns with spaCy's large model; here a name's nouns are its
words that name product types (`Catalogue.type_words`), which is exact for the generated catalogue.
`exact_options=("size",)` matches those dimensions by exact (colour-normalised) value instead, as an older
WebShop revision did; it is off by default (the original is fuzzy for sizes too).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher

from rapidfuzz import fuzz

from eppo_envs.webshop.catalogue import Goal, Product

FUZZY_THRESHOLD = 85
# WebShop's COLOR_SET (web_agent_site/engine/normalize.py), in its order: the first one found in a value wins.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "bordeaux",
    "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut",
    "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim",
    "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green",
    "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)
_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
_LATIN1 = {code: None for code in range(128, 256)}
_NON_WORD = re.compile(r"\W")


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
    """The first WebShop colour contained in `value` (as a substring, case-sensitive, as the original), else
    `value` itself: "navy blue" becomes "blue"... and so does "bluetooth", exactly as in WebShop."""
    for colour in COLOR_SET:
        if colour in value:
            return colour
    return value


def _process(text: str) -> str:
    """thefuzz's `full_process(s, force_ascii=True)`: drop U+0080-U+00FF, punctuation to spaces, lower, strip."""
    return _NON_WORD.sub(" ", text.translate(_LATIN1)).lower().strip()


def _ratio(a: str, b: str) -> int:
    """thefuzz 0.19's `fuzz.ratio` as WebShop runs it (no python-Levenshtein): difflib's Ratcliff-Obershelp ratio."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz 0.19's `fuzz.token_set_ratio(a, b)`: the best ratio among the shared tokens and each side's tokens
    (sorted, after the shared ones). rapidfuzz's score is not it: it counts the longest common subsequence, which
    difflib's greedy longest-block matching can miss ("aluminum free" ~ "almuium free": 88 there, 72 here)."""
    p1, p2 = _process(a), _process(b)
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = f"{sect} {' '.join(sorted(t1 - t2))}".strip()
    c21 = f"{sect} {' '.join(sorted(t2 - t1))}".strip()
    return max(_ratio(sect, c12), _ratio(sect, c21), _ratio(c12, c21))


def fuzzy_match(a: str, b: str) -> bool:
    # rapidfuzz's score bounds thefuzz's from above (difflib's matching blocks are one common subsequence, never
    # longer than the longest), so it rules most pairs out at C speed; the rest get the exact score.
    if round(fuzz.token_set_ratio(a, b, processor=_process)) <= FUZZY_THRESHOLD:
        return False
    return fuzzy_score(a, b) > FUZZY_THRESHOLD


def nouns(text: str, type_words: frozenset[str]) -> list[str]:
    """The type words of `text`, in order and repeated as often as they occur: the original's noun list (spaCy's
    tokens tagged NOUN/PROPN), whose length, duplicates included, divides the title score."""
    return [w for w in _WORD.findall(text.lower()) if w in type_words]


def category_levels(category: str) -> set[str]:
    """The levels of a category path: WebShop's files separate them with "›", which the original splits on alone
    (a ">" inside a level stays part of it); the generated catalogue writes " > "."""
    return {x.strip() for x in category.split("\u203a" if "\u203a" in category else ">")}


def type_reward(product: Product, goal: Goal, type_words: frozenset[str]) -> tuple[float, float, bool, bool]:
    query_match = product.query == goal.query
    bought, wanted = category_levels(product.product_category), category_levels(goal.product_category)
    category_match = len(bought & wanted) >= 2
    desired = nouns(goal.name, type_words)
    # set overlap over the list's length, as the original: "Knife Block Knife Set" wants 3 nouns, not 2
    title_score = len(set(nouns(product.title, type_words)) & set(desired)) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score, query_match, category_match


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    title, features, description = product.title.lower(), " ".join(product.features).lower(), \
        product.description.lower()
    count = 0
    for wanted in goal_attributes:
        if any(fuzzy_match(have, wanted) for have in product.attributes):
            count += 1
        elif wanted in title or wanted in features or wanted in description:
            count += 1
    return count


def option_matches(goal_options: Iterable[str], chosen: dict[str, str], exact_options: Collection[str] = ()) -> int:
    """Goal options (values) met by a chosen option value: at most one match per goal option."""
    exact = {d.lower() for d in exact_options}
    picked = [(dim.lower(), normalize_color(value)) for dim, value in chosen.items()]
    count = 0
    for wanted in (normalize_color(v) for v in goal_options):
        if any(value == wanted if dim in exact else fuzzy_match(value, wanted) for dim, value in picked):
            count += 1
    return count


def compute_reward(product: Product, goal: Goal, chosen: dict[str, str], type_words: frozenset[str],
                   price: float | None = None, exact_options: Collection[str] = ()) -> RewardInfo:
    price = product.price if price is None else price
    r_type, title_score, query_match, category_match = type_reward(product, goal, type_words)
    n_att = attribute_matches(product, goal.attributes)
    n_opt = option_matches(goal.options.values(), chosen, exact_options)
    price_ok = price <= goal.price_upper if goal.price_upper > 0 else True
    total = (n_att + n_opt + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    total *= r_type
    return RewardInfo(total, r_type, n_att, n_opt, price_ok, title_score, query_match, category_match)
