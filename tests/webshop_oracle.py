"""Test oracle: WebShop's reward transcribed from the original (princeton-nlp/WebShop, commit d149d0d,
`web_agent_site/engine/goal.py` and `normalize.py`), on WebShop's own dict format, with the fuzzy scorer of the
thefuzz version WebShop pins (0.19.0, which without python-Levenshtein uses difflib's SequenceMatcher).

Only the noun tagger is replaced (spaCy's large model is not available offline): `nouns` is passed in.
Kept independent of eppo_envs on purpose; nothing here is imported by the package.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

COLOR_SET = [
    'alabaster', 'apricot', 'aqua', 'ash', 'asphalt', 'azure',
    'banana', 'beige', 'black', 'blue', 'blush', 'bordeaux', 'bronze',
    'brown', 'burgundy', 'camel', 'camo', 'caramel', 'champagne',
    'charcoal', 'cheetah', 'chestnut', 'chocolate', 'christmas', 'coffee',
    'cognac', 'copper', 'coral', 'cranberry', 'cream', 'crystal', 'dark',
    'denim', 'eggplant', 'elephant', 'espresso', 'fuchsia', 'gold', 'granite',
    'grape', 'graphite', 'grass', 'gray', 'green', 'grey', 'heather', 'indigo',
    'ivory', 'ivy', 'khaki', 'lavender', 'lemon', 'leopard', 'light', 'lilac',
    'lime', 'magenta', 'maroon', 'mauve', 'merlot', 'midnight', 'mint', 'mocha',
    'multicolor', 'mushroom', 'mustard', 'natural', 'navy', 'nude', 'olive',
    'orange', 'peach', 'pewter', 'pink', 'plum', 'purple', 'rainbow', 'red',
    'rose', 'royal', 'rust', 'sand', 'sapphire', 'seashell', 'silver', 'skull',
    'slate', 'steel', 'stone', 'stonewash', 'sunflower', 'tan', 'taupe', 'teal',
    'tiger', 'turquoise', 'violet', 'walnut', 'wheat', 'white', 'wine', 'yellow',
]


def normalize_color(color_string):
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string


# --- thefuzz 0.19.0: utils.full_process(force_ascii=True), fuzz.ratio, fuzz.token_set_ratio -----------------
_BAD = {i: None for i in range(128, 256)}
_NON_WORD = re.compile(r"(?ui)\W")


def full_process(s):
    return _NON_WORD.sub(" ", s.translate(_BAD)).lower().strip()


def ratio(s1, s2):
    if s1 is None or s2 is None:
        return 0
    if s1 == s2:
        return 100
    if len(s1) == 0 or len(s2) == 0:
        return 0
    return int(round(100 * SequenceMatcher(None, s1, s2).ratio()))


def token_set_ratio(s1, s2):
    p1, p2 = full_process(s1), full_process(s2)
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    c21 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    sect = sect.strip()
    return max(ratio(sect, c12), ratio(sect, c21), ratio(c12, c21))


# --- goal.py ------------------------------------------------------------------------------------------------
def get_type_reward(purchased_product, goal, nouns):
    query_match = purchased_product['query'] == goal['query']
    purchased_product_category = [x.strip() for x in purchased_product['product_category'].split('›')]
    goal_product_category = [x.strip() for x in goal['product_category'].split('›')]
    category_match = len(set(purchased_product_category) & set(goal_product_category)) >= 2
    purchased_type_parse = nouns(purchased_product['name'])
    desired_type_parse = nouns(goal['name'])
    n_intersect_type = len(set(purchased_type_parse) & set(desired_type_parse))
    if len(desired_type_parse) == 0:
        title_score = 0.2
    else:
        title_score = n_intersect_type / len(desired_type_parse)
    r_type = 1.0
    match = query_match or category_match or title_score > 0.2
    if not match:
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match, title_score=title_score)


def get_attribute_reward(purchased_product, goal):
    purchased_attrs = purchased_product['Attributes']
    goal_attrs = goal['attributes']
    num_attr_matches = 0
    for g_attr in goal_attrs:
        matched = False
        for p_attr in purchased_attrs:
            score = token_set_ratio(p_attr, g_attr)
            if score > 85:
                num_attr_matches += 1
                matched = True
                break
        if not matched and (
            g_attr in purchased_product['Title'].lower()
            or g_attr in ' '.join(purchased_product['BulletPoints']).lower()
            or g_attr in purchased_product['Description'].lower()
        ):
            num_attr_matches += 1
            matched = True
    r_attr = num_attr_matches / len(goal_attrs)
    return r_attr, num_attr_matches


def get_option_reward(purchased_options, goal_options):
    purchased_options = [normalize_color(o) for o in purchased_options]
    goal_options = [normalize_color(o) for o in goal_options]
    num_option_matches = 0
    for g_option in goal_options:
        for p_option in purchased_options:
            score = token_set_ratio(p_option, g_option)
            if score > 85:
                num_option_matches += 1
                break
    r_option = num_option_matches / len(goal_options) if len(goal_options) > 0 else None
    return r_option, num_option_matches


def get_reward(purchased_product, goal, price, options, nouns):
    """Human goals (`goal_options` a list of values), the shape WebShop evaluates on."""
    r_type_dict = get_type_reward(purchased_product, goal, nouns)
    r_price = (price <= goal['price_upper']) if goal['price_upper'] > 0 else None
    r_att, num_attr_matches = get_attribute_reward(purchased_product, goal)
    r_option, num_option_matches = get_option_reward(list(options.values()), goal['goal_options'])
    total_reward = (
        (num_attr_matches + num_option_matches + r_price)
        / (len(goal['attributes']) + len(goal['goal_options']) + 1)
    )
    total_reward *= r_type_dict['r_type']
    return total_reward
