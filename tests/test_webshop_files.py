"""Loading WebShop's own file formats (tiny files written here in the same shape as the released ones)."""

import json

import pytest

import eppo_envs
import eppo_envs.webshop  # noqa: F401
from eppo_envs.core import expert_policy, play_episode
from eppo_envs.webshop.real_data import load_webshop_files


def _item(asin, name, query, pricing, colours, category="Beauty & Personal Care \u203a Skin Care \u203a Lotions"):
    return {
        "asin": asin, "name": name, "query": query, "category": "beauty", "product_category": category,
        "full_description": f"{name}. Great for dry skin.", "pricing": pricing, "images": ["x.jpg"],
        "small_description": [f"{name} feature one", "Fragrance free formula"],
        "customization_options": {"Color": [{"value": c, "image": None} for c in colours],
                                  "Size": [{"value": "8 Fl Oz/Pack", "image": None}, {"value": "16 fl oz", "image": None}]},
        "Reviews": [{"stars": 5, "title": "nice", "review": "works well"}],
    }


@pytest.fixture
def webshop_files(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPO_CACHE_DIR", str(tmp_path / "cache"))
    items = [
        _item("B0LOTION01", "Soothing Body Lotion", "body lotion", "$12.99", ["White", "Pink"]),
        _item("B0LOTION02", "Daily Body Lotion", "body lotion", "$8.00 - $20.00", ["Blue"]),
        _item("B0SHAMPOO1", "Herbal Shampoo", "shampoo", "$5.50", ["Green"],
              "Beauty & Personal Care \u203a Hair Care \u203a Shampoo"),
        _item("B0SHAMPOO2", "Mint Shampoo", "shampoo", "", ["Clear"], "Beauty & Personal Care \u203a Hair Care \u203a Shampoo"),
        {"asin": "nan", "name": "broken"},
        _item("B0LOTION01", "duplicate", "body lotion", "$1.00", ["Red"]),
    ]
    attrs = {
        "B0LOTION01": {"attributes": ["dry skin", "fragrance free"], "instruction": "i need a body lotion for dry skin",
                       "instruction_attributes": ["dry skin"]},
        "B0SHAMPOO1": {"attributes": ["herbal"], "instruction": "i want an herbal shampoo",
                       "instruction_attributes": ["herbal"]},
        "B0SHAMPOO2": {"attributes": ["mint"], "instruction": "i want a mint shampoo", "instruction_attributes": ["mint"]},
    }
    human = {
        "B0LOTION01": [{"instruction": "i need a fragrance free body lotion in pink.",
                        "instruction_attributes": ["fragrance free"], "instruction_options": ["pink"]}],
        "B0SHAMPOO1": [{"instruction": "herbal shampoo, 16 fl oz", "instruction_attributes": ["herbal"],
                        "instruction_options": ["16 fl oz"]},
                       {"instruction": "skipped: no attributes", "instruction_attributes": [], "instruction_options": []}],
        "B0LOTION02": [{"instruction": "a body lotion in blue", "instruction_attributes": ["dry skin"],
                        "instruction_options": ["blue"]}],
    }
    paths = {}
    for name, data in (("items_shuffle.json", items), ("items_ins_v2.json", attrs), ("items_human_ins.json", human)):
        paths[name] = tmp_path / name
        paths[name].write_text(json.dumps(data))
    return paths


def test_products_are_cleaned_like_webshop(webshop_files):
    catalogue = load_webshop_files(str(webshop_files["items_shuffle.json"]), str(webshop_files["items_ins_v2.json"]))
    assert [p.asin for p in catalogue.products] == ["B0LOTION01", "B0LOTION02", "B0SHAMPOO1", "B0SHAMPOO2"]
    lotion = catalogue.by_asin["B0LOTION01"]
    assert lotion.price == 12.99 and lotion.options == {"color": ["white", "pink"], "size": ["8 fl oz | pack", "16 fl oz"]}
    assert lotion.product_category == "Beauty & Personal Care \u203a Skin Care \u203a Lotions"
    assert lotion.reviews[0]["score"] == 5 and lotion.attributes == ["dry skin", "fragrance free"]
    assert 8.0 <= catalogue.by_asin["B0LOTION02"].price <= 20.0 and catalogue.by_asin["B0SHAMPOO2"].price == 100.0
    assert catalogue.by_asin["B0LOTION02"].attributes == ["DUMMY_ATTR"]
    # synthetic goals (no human file): one per product with an instruction, one option value per dimension
    goals = catalogue.goals["train"] + catalogue.goals["test"]
    assert len(goals) == 3 and all("price lower than" in g.instruction for g in goals)
    assert {"body", "lotion", "shampoo"} <= catalogue.type_words


def test_human_goals_and_env(webshop_files):
    kwargs = dict(items_path=str(webshop_files["items_shuffle.json"]),
                  attributes_path=str(webshop_files["items_ins_v2.json"]),
                  human_instructions_path=str(webshop_files["items_human_ins.json"]))
    env = eppo_envs.make("eppo/WebShop-v0", split="test", **kwargs)
    catalogue = env.unwrapped.world.catalogue
    goals = catalogue.goals["train"] + catalogue.goals["test"]
    assert sorted(g.asin for g in goals) == ["B0LOTION01", "B0LOTION02", "B0SHAMPOO1"]  # no-attribute entry skipped
    pink = next(g for g in goals if g.asin == "B0LOTION01")
    assert list(pink.options.values()) == ["pink"] and pink.instruction.startswith("i need a fragrance free body lotion in pink,")
    for split in ("train", "test"):
        for seed in range(env.unwrapped.num_instances(split)):
            episode = play_episode(env, expert_policy(env), seed=seed, split=split)
            assert episode.won, episode.turns[-1].observation
    env.close()


def test_loader_errors_are_clear(webshop_files, tmp_path):
    with pytest.raises(ValueError, match="fewer than 2 instructions"):
        load_webshop_files(str(webshop_files["items_shuffle.json"]))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_webshop_files(str(bad))
