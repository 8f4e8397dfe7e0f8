"""Loading WebShop's own files instead of the generated catalogue.

    items_shuffle.json     list of products (asin, name, full_description, pricing, product_category, query,
                           small_description, customization_options, optional Reviews / average_rating)
    items_ins_v2.json      {asin: {"attributes": [...], "instruction": str, "instruction_attributes": [...]}}
    items_human_ins.json   {asin: [{"instruction": str, "instruction_attributes": [...],
                                    "instruction_options": [...]}, ...]}

Products are cleaned as WebShop's `load_products` does (prices parsed, option values lower-cased with '/' as
' | '); goals follow `get_human_goals` when the human file is given, else `get_synthetic_goals` (one goal per
product, with one option value per dimension instead of all combinations). Prices inside a range and price caps
are drawn from seeded generators, so a load is deterministic.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from eppo_envs.webshop.catalogue import Catalogue, Goal, Product, price_cap

_STOPWORDS = frozenset("a an and for in of on the to with by from or at as is are be this that".split())
TEST_GOALS = 500  # WebShop evaluates on its first 500 goals


def _read_json(path: str | Path, what: str):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"WebShop {what} file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"WebShop {what} file {path} is not valid JSON: {exc}") from None


def _price(pricing: object, rng: random.Random) -> float:
    prices = []
    for part in str(pricing or "").split("$")[1:]:
        try:
            prices.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    if not prices:
        return 100.0
    return prices[0] if len(prices) == 1 else round(rng.uniform(*prices[:2]), 2)


def _product(raw: dict, attributes: dict) -> Product:
    asin = str(raw["asin"])
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options[name.lower()] = [str(c["value"]).strip().replace("/", " | ").lower() for c in contents]
    bullets = raw.get("small_description") or []
    reviews = [{"score": r.get("score", r.get("stars", "?")), "title": r.get("title", ""),
                "body": r.get("body", r.get("review", ""))} for r in raw.get("Reviews") or []]
    return Product(
        asin=asin, title=str(raw.get("name") or ""), price=_price(raw.get("pricing"), random.Random(asin)),
        query=str(raw.get("query") or "").lower().strip(),
        product_category=str(raw.get("product_category") or ""),  # "A › B › C", split by reward.category_levels
        attributes=list(attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"]), options=options,
        description=str(raw.get("full_description") or ""),
        features=list(bullets) if isinstance(bullets, list) else [str(bullets)], reviews=reviews,
        rating=str(raw.get("average_rating", "N.A.")),
    )


def _goal(goal_id: str, product: Product, text: str, attributes: list[str], options: dict[str, str],
          rng: random.Random) -> Goal:
    cap = price_cap(product.price, rng)
    price_text = f", and price lower than {cap:.2f} dollars" if cap < 1_000_000 else ""
    return Goal(goal_id, product.asin, text.strip().strip(".") + price_text, list(attributes), options, cap,
                product.query, product.title, product.product_category)


def load_webshop_files(items_path: str, attributes_path: str | None = None, human_path: str | None = None,
                       seed: int = 0) -> Catalogue:
    raw_items = _read_json(items_path, "items")
    attributes = _read_json(attributes_path, "attributes") if attributes_path else {}
    products: list[Product] = []
    seen: set[str] = set()
    for raw in raw_items:
        asin = str(raw.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:  # WebShop skips these too
            continue
        seen.add(asin)
        products.append(_product(raw, attributes))
    by_asin = {p.asin: p for p in products}
    rng = random.Random(seed)
    goals: list[Goal] = []
    if human_path:
        for asin, entries in _read_json(human_path, "human instructions").items():
            for entry in entries if asin in by_asin else []:
                if entry.get("instruction_attributes"):
                    values = entry.get("instruction_options") or []
                    options = values if isinstance(values, dict) else {f"option {i}": v for i, v in enumerate(values)}
                    goals.append(_goal(f"h{len(goals):05d}", by_asin[asin], entry["instruction"],
                                       entry["instruction_attributes"], options, rng))
    else:
        for asin, entry in attributes.items():
            if asin in by_asin and entry.get("instruction") and entry.get("instruction_attributes"):
                product = by_asin[asin]
                options = {dim: rng.choice(values) for dim, values in sorted(product.options.items()) if values}
                option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
                text = entry["instruction"].strip().strip(".") + (f" with {option_text}" if option_text else "")
                goals.append(_goal(f"s{len(goals):05d}", product, text, entry["instruction_attributes"], options, rng))
    if len(goals) < 2:
        raise ValueError("WebShop files gave fewer than 2 instructions: pass items_ins_v2.json (attributes_path) "
                         "or items_human_ins.json (human_instructions_path) matching the items file")
    random.Random(233).shuffle(goals)  # WebShop's own goal shuffle seed
    n_test = min(TEST_GOALS, max(1, len(goals) // 5))
    type_words = frozenset(w for p in products for w in re.findall(r"[a-z0-9]+", p.query) if w not in _STOPWORDS)
    return Catalogue(str(Path(items_path).resolve()), products, {"test": goals[:n_test], "train": goals[n_test:]},
                     type_words)
