"""The words the generated catalogue is made of: product types with their category path, type nouns, attribute
pool, option dimensions and price range, read from the shipped `assets/webshop/vocab.json`; `catalogue.py` turns
them into products and instructions.

A type's `nouns` are the words that name it ("deodorant stick" -> deodorant, stick): the reward's noun overlap
(WebShop tags nouns with spaCy) uses exactly these, so it is exact on our catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from eppo_envs.core.assets import load_json


@dataclass(frozen=True)
class ProductType:
    name: str  # the search query a shopper would type, and the product's `query` field
    nouns: tuple[str, ...]
    category: str  # path joined with " > " (WebShop's `product_category` joins with " › ")
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (dimension, values)
    price: tuple[float, float]


_DATA = load_json("webshop", "vocab.json")  # assets/webshop/vocab.json


def _type(t: dict) -> ProductType:
    return ProductType(t["name"], tuple(t["nouns"]), t["category"], tuple(t["attributes"]),
                       tuple((k, tuple(v)) for k, v in t["options"].items()), (t["price"][0], t["price"][1]))


SIZES: tuple[str, ...] = tuple(_DATA["sizes"])
PRODUCT_TYPES: tuple[ProductType, ...] = tuple(_type(t) for t in _DATA["product_types"])
BRAND_SYLLABLES: tuple[str, ...] = tuple(_DATA["brand_syllables"])
TITLE_EXTRAS: tuple[str, ...] = tuple(_DATA["title_extras"])
REVIEW_TEMPLATES: tuple[tuple[int, str], ...] = tuple((r["stars"], r["text"]) for r in _DATA["review_templates"])
