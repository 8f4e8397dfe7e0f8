"""`compute_reward` equals WebShop's original formula (tests/webshop_oracle.py, a transcription of goal.py) on
generated (goal, product, options) cases, wrong options included, and on WebShop's own data format."""

from __future__ import annotations

import random

import pytest
import webshop_oracle as oracle
from test_webshop_files import webshop_files  # noqa: F401  (fixture: tiny files in WebShop's format)

from eppo_envs.webshop.catalogue import Catalogue, Goal, Product, generate
from eppo_envs.webshop.real_data import load_webshop_files
from eppo_envs.webshop.reward import compute_reward, fuzzy_match, fuzzy_score, normalize_color, nouns


def as_webshop_category(category: str) -> str:
    """WebShop's separator: the generated catalogue's " > " becomes " › "; a path from WebShop's files is as it was."""
    return category if "\u203a" in category else category.replace(">", "\u203a")


def as_webshop_product(p: Product) -> dict:
    """A product the way WebShop's engine holds it (after `load_products`)."""
    return {"asin": p.asin, "name": p.title, "Title": p.title, "query": p.query, "Attributes": list(p.attributes),
            "BulletPoints": list(p.features), "Description": p.description,
            "product_category": as_webshop_category(p.product_category)}


def as_webshop_goal(g: Goal) -> dict:
    """A human goal: `goal_options` is the list of wanted values."""
    return {"asin": g.asin, "query": g.query, "name": g.name, "attributes": list(g.attributes),
            "goal_options": list(g.options.values()), "price_upper": g.price_upper,
            "product_category": as_webshop_category(g.product_category)}


def cases(catalogue: Catalogue, goals: list[Goal], seed: int = 0):
    """For each goal: its product with the right options, with each single option wrong, with none, and at a
    price over the cap; then random products (same type and any type) with random options."""
    rng = random.Random(seed)
    by_query: dict[str, list[Product]] = {}
    for p in catalogue.products:
        by_query.setdefault(p.query, []).append(p)
    for goal in goals:
        target = catalogue.by_asin[goal.asin]
        right = {dim: goal.options.get(dim, values[0]) for dim, values in target.options.items()}
        yield goal, target, right, target.price
        yield goal, target, {}, target.price
        yield goal, target, right, goal.price_upper + 1.0
        for dim, values in target.options.items():
            for value in values:
                if value != right[dim]:
                    yield goal, target, {**right, dim: value}, target.price
        for other in (rng.choice(by_query[target.query]), rng.choice(catalogue.products)):
            chosen = {dim: rng.choice(values) for dim, values in other.options.items()}
            yield goal, other, chosen, other.price


def differences(catalogue: Catalogue, goals: list[Goal]) -> tuple[int, list]:
    words = catalogue.type_words

    def noun_list(text: str) -> list[str]:  # spaCy's noun tokens in order, repeats kept (the oracle counts them)
        return nouns(text, words)

    n, diffs = 0, []
    for goal, product, chosen, price in cases(catalogue, goals):
        n += 1
        ours = compute_reward(product, goal, chosen, words, price=price).reward
        theirs = oracle.get_reward(as_webshop_product(product), as_webshop_goal(goal), price, chosen, noun_list)
        if ours != theirs:
            diffs.append((goal.goal_id, product.asin, chosen, ours, theirs))
    return n, diffs


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return generate(num_products=2_000, num_goals=600, num_test=100, seed=3)


def test_generated_cases_match_the_original_exactly(catalogue):
    goals = catalogue.goals["test"] + catalogue.goals["train"][:200]
    n, diffs = differences(catalogue, goals)
    assert n >= 1_000 and diffs == [], (n, diffs[:5])


def test_webshop_format_cases_match_the_original_exactly(webshop_files):  # noqa: F811
    catalogue = load_webshop_files(*(str(webshop_files[name]) for name in
                                     ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json")))
    goals = catalogue.goals["train"] + catalogue.goals["test"]
    n, diffs = differences(catalogue, goals)
    assert n >= 10 and diffs == [], diffs


def test_fuzzy_scoring_is_thefuzz_0_19s():
    pairs = [("Vegan", "vegan"), ("long-lasting", "long lasting"), ("pack of 2", "pack of 3"), ("red", "Bluetooth"),
             ("caf\u00e9 noir", "cafe noir"), ("x_y", "x y"), ("30w x 32l", "32w x 32l"), ("", "a"), ("blue", "blue")]
    for a, b in pairs:
        assert fuzzy_score(a, b) == oracle.token_set_ratio(a, b), (a, b)
    assert fuzzy_score("Vegan", "vegan") == 100 and fuzzy_score("long-lasting", "long lasting") == 100


def test_typos_are_scored_with_difflib_as_thefuzz_0_19_does(catalogue):
    """Human goals have typos. rapidfuzz (longest common subsequence) gives "aluminum free" ~ "almuium free" 88, a
    match, where WebShop's thefuzz (difflib's longest blocks) gives 72; every 1-2 letter deletion or swap of the
    catalogue's option values and attributes scores as the oracle does."""
    assert (fuzzy_score("aluminum free", "almuium free"), fuzzy_score("12 piece", "12 pecie")) == (72, 75)
    assert not fuzzy_match("aluminum free", "almuium free") and fuzzy_match("aluminum free", "aluminium free")

    def typos(text: str) -> set[str]:
        return {text[:i] + text[i + 1:] for i in range(len(text))} | {
            text[:i] + text[i + 1] + text[i] + text[i + 2:] for i in range(len(text) - 1)}

    values = sorted({v for p in catalogue.products for vs in p.options.values() for v in vs}
                    | {a for p in catalogue.products for a in p.attributes})
    pairs = [(v, t) for v in values for once in typos(v) for t in {once, *typos(once)}]
    assert len(pairs) > 50_000
    wrong = [(a, b) for a, b in pairs if fuzzy_match(a, b) != (oracle.token_set_ratio(a, b) > 85)]
    assert wrong == [], wrong[:5]


def test_wrong_colour_of_the_right_product_is_not_rescued_by_the_title():
    product = Product("B1", "Acme Bluetooth Speaker", 30.0, "speaker", "Electronics > Audio > Speakers",
                      ["waterproof"], {"color": ["red", "blue"]}, "A loud speaker.", ["Bluetooth 5.0"])
    goal = Goal("g", "B1", "", ["waterproof"], {"color": "red"}, 40.0, "speaker", "Acme Bluetooth Speaker",
                "Electronics > Audio > Speakers")
    words = frozenset({"speaker"})
    assert compute_reward(product, goal, {"color": "red"}, words).reward == 1.0
    wrong = compute_reward(product, goal, {"color": "blue"}, words)
    assert wrong.reward == pytest.approx(2 / 3) and wrong.n_options == 0
    assert normalize_color("bluetooth speaker") == "blue"  # WebShop's own normalisation, kept as it is


def test_sizes_are_fuzzy_by_default_and_exact_on_request():
    product = Product("B1", "Acme Deodorant Stick", 9.0, "deodorant", "Beauty > Personal Care > Deodorants", ["unscented"],
                      {"size": ["pack of 2", "pack of 3"]}, "", [])
    goal = Goal("g", "B1", "", ["unscented"], {"size": "pack of 2"}, 20.0, "deodorant", "Acme Deodorant Stick",
                "Beauty > Personal Care > Deodorants")
    words = frozenset({"deodorant", "stick"})
    assert compute_reward(product, goal, {"size": "pack of 3"}, words).reward == 1.0  # as the original
    exact = compute_reward(product, goal, {"size": "pack of 3"}, words, exact_options=("size",))
    assert exact.reward == pytest.approx(2 / 3)


def test_a_goal_name_repeating_a_noun_is_scored_as_the_original():
    """The original divides the shared nouns by the length of the goal's noun *list*: "Knife Block Knife Set Stand"
    has 5 nouns, so a chef knife shares 1/5 = 0.2 (r_type 0.5), not 1/4 of the distinct ones (0.25, r_type 1)."""
    words = frozenset({"knife", "block", "set", "stand"})
    goal = Goal("g", "B1", "", ["sharp"], {}, 50.0, "knife block set", "Knife Block Knife Set Stand",
                "Home > Kitchen > Knife Sets")
    knife = Product("B2", "Acme Sharp Chef Knife", 20.0, "chef knife", "Tools > Blades", ["sharp"], {}, "", [])
    ours = compute_reward(knife, goal, {}, words)
    theirs = oracle.get_reward(as_webshop_product(knife), as_webshop_goal(goal), knife.price, {},
                               lambda text: nouns(text, words))
    assert ours.title_score == pytest.approx(0.2) and ours.r_type == 0.5 and ours.reward == theirs == 0.5


def test_a_level_holding_a_greater_than_sign_stays_one_level():
    """WebShop's files separate levels with "›" and the original splits on it alone: "Cutlery > Blocks" is one
    level, so these paths share only "Home" and "Knives" and the categories match; split on ">" as well they would
    share three levels, and with "Cutlery > Sets" for "Cutlery > Blocks" the two readings part (r_type 1.0 or 0.5,
    the title sharing 1 of the goal's 5 nouns decides nothing)."""
    words = frozenset({"knife", "block", "set", "stand"})
    goal = Goal("g", "B1", "", ["sharp"], {}, 50.0, "knife block set", "Knife Block Knife Set Stand",
                "Home \u203a Cutlery > Blocks \u203a Knives")
    for category, match in [("Home \u203a Cutlery > Sets \u203a Knives", True),
                            ("Home \u203a Cutlery > Sets \u203a Forks", False),
                            ("Garden \u203a Cutlery > Blocks \u203a Forks", False)]:
        knife = Product("B2", "Acme Sharp Chef Knife", 20.0, "chef knife", category, ["sharp"], {}, "", [])
        ours = compute_reward(knife, goal, {}, words)
        theirs = oracle.get_reward(as_webshop_product(knife), as_webshop_goal(goal), knife.price, {},
                                   lambda text: nouns(text, words))
        assert ours.category_match is match and ours.r_type == (1.0 if match else 0.5), category
        assert ours.reward == pytest.approx(theirs), category
