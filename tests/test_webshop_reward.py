"""WebShop's reward formula on hand-built products and goals."""

import pytest

from eppo_envs.webshop.catalogue import Goal, Product
from eppo_envs.webshop.reward import compute_reward, normalize_color

TYPE_WORDS = frozenset({"deodorant", "stick", "shampoo", "earbuds"})


def _deodorant(**overrides) -> Product:
    fields = dict(
        asin="B1", title="Acme Unscented Deodorant Stick", price=12.0, query="deodorant stick",
        product_category="Beauty & Personal Care > Personal Care > Deodorants",
        attributes=["unscented", "aluminum free", "sensitive skin"],
        options={"size": ["2.6 oz", "pack of 2"], "scent": ["unscented", "lavender"]},
        description="A gentle stick.", features=["Gentle on skin"],
    )
    fields.update(overrides)
    return Product(**fields)


GOAL = Goal("g1", "B1", "i need ...", ["unscented", "aluminum free", "sensitive skin"],
            {"size": "pack of 2", "scent": "lavender"}, 30.0, "deodorant stick", "Acme Unscented Deodorant Stick",
            "Beauty & Personal Care > Personal Care > Deodorants")
RIGHT = {"size": "pack of 2", "scent": "lavender"}


def test_full_match_is_one():
    info = compute_reward(_deodorant(), GOAL, RIGHT, TYPE_WORDS)
    assert info.reward == 1.0 and info.r_type == 1.0 and info.n_attributes == 3 and info.n_options == 2


def test_missing_one_of_three_attributes():
    product = _deodorant(attributes=["unscented", "aluminum free"])
    assert compute_reward(product, GOAL, RIGHT, TYPE_WORDS).reward == pytest.approx(5 / 6)
    # ... unless the product's text says it: WebShop also looks in title, features and description
    product = _deodorant(attributes=["unscented", "aluminum free"], description="Made for sensitive skin.")
    assert compute_reward(product, GOAL, RIGHT, TYPE_WORDS).reward == 1.0


def test_fuzzy_attribute_match():
    product = _deodorant(attributes=["unscented", "free of aluminum", "skin sensitive"])
    assert compute_reward(product, GOAL, RIGHT, TYPE_WORDS).n_attributes == 3


def test_over_the_price_cap_lowers_it():
    info = compute_reward(_deodorant(price=31.0), GOAL, RIGHT, TYPE_WORDS)
    assert not info.price_ok and info.reward == pytest.approx(5 / 6)


def test_wrong_or_missing_options_lower_it():
    assert compute_reward(_deodorant(), GOAL, {"size": "2.6 oz", "scent": "lavender"}, TYPE_WORDS).reward == \
        pytest.approx(5 / 6)  # "2.6 oz" is not within fuzzy reach of "pack of 2"
    assert compute_reward(_deodorant(), GOAL, {}, TYPE_WORDS).reward == pytest.approx(4 / 6)


def test_wrong_product_type_scales_it_down():
    shampoo = _deodorant(title="Acme Unscented Shampoo", query="shampoo",
                         product_category="Beauty & Personal Care > Hair Care > Shampoo")
    info = compute_reward(shampoo, GOAL, RIGHT, TYPE_WORDS)
    assert info.title_score == 0.0 and info.r_type == 0.0 and info.reward == 0.0
    # half the goal's nouns, but another query and category: r_type 1 via title_score > 0.2
    stick = _deodorant(title="Acme Glue Stick", query="glue stick", product_category="Office > Glue")
    info = compute_reward(stick, GOAL, RIGHT, TYPE_WORDS)
    assert info.title_score == 0.5 and info.r_type == 1.0
    # same category path (>= 2 shared levels) but a name without the goal's nouns: still 0 (title_score == 0)
    other = _deodorant(title="Acme Body Spray", query="body spray")
    assert compute_reward(other, GOAL, RIGHT, TYPE_WORDS).r_type == 0.0


def test_type_reward_steps_for_weak_noun_overlap():
    words = frozenset(f"n{i}" for i in range(11))
    product = _deodorant(title="Acme n0", query="other", product_category="C > D")

    def r_type(goal_name: str) -> float:
        goal = Goal("g", "B1", "", ["unscented"], {}, 30.0, "q", goal_name, "A > B")
        return compute_reward(product, goal, {}, words).r_type

    assert r_type("n0 n1 n2 n3") == 1.0  # title_score 0.25 > 0.2
    assert r_type("n0 n1 n2 n3 n4") == 0.5  # 0.2: no query, category or title match
    assert r_type(" ".join(f"n{i}" for i in range(11))) == 0.1  # 1/11 < 0.1
    assert r_type("n1 n2") == 0.0  # no shared noun
    # a repeated noun counts each time, as in the original's token list: 1 of 5 nouns is 0.2, not 1 of 4 (0.25)
    assert r_type("n0 n1 n2 n1 n3") == 0.5


def test_normalize_color():
    # WebShop's: the first of its COLOR_SET found as a substring, case-sensitive ("blue" precedes "navy")
    assert normalize_color("navy blue") == "blue" and normalize_color("grey") == "grey"
    assert normalize_color("Navy Blue") == "Navy Blue" and normalize_color("dark wash") == "ash"
    assert normalize_color("2.6 oz") == "2.6 oz"


def test_boundaries_of_the_price_term_the_category_match_and_an_empty_noun_set():
    from dataclasses import replace

    from eppo_envs.webshop.reward import type_reward

    assert compute_reward(_deodorant(price=30.0), GOAL, RIGHT, TYPE_WORDS).price_ok  # at the cap: within it
    no_cap = replace(GOAL, price_upper=0.0)
    assert compute_reward(_deodorant(price=999.0), no_cap, RIGHT, TYPE_WORDS).reward == 1.0  # no cap: always met
    # category paths must share at least 2 levels; one shared level is no match
    other = _deodorant(query="soap", product_category="Beauty & Personal Care > Skin Care > Soap")
    assert type_reward(other, GOAL, TYPE_WORDS)[3] is False
    two = _deodorant(query="soap", product_category="Beauty & Personal Care > Personal Care > Soap")
    assert type_reward(two, GOAL, TYPE_WORDS)[3] is True
    # a goal name with no product-type noun scores the title 0.2 (WebShop's default): r_type 0.5, not 0
    plain = replace(GOAL, name="Acme Thing", query="thing", product_category="Other > Things")
    assert type_reward(other, plain, TYPE_WORDS)[:2] == (0.5, 0.2)
