"""WebShop in text mode: catalogue, search pages, navigation, messages, expert (the reward has its own file)."""

import pytest
from gymnasium.error import ResetNeeded

import eppo_envs
import eppo_envs.webshop  # noqa: F401  (registers the ids)
from eppo_envs.core import expert_policy, play_episode
from eppo_envs.webshop.catalogue import generate
from eppo_envs.webshop.env import extract_command
from eppo_envs.webshop.pages import Command
from eppo_envs.webshop.world import get_world


@pytest.fixture(scope="module")
def env():
    env = eppo_envs.make("eppo/WebShop-v0")
    yield env
    env.close()


def test_catalogue_size_and_splits():
    catalogue = get_world().catalogue
    assert len(catalogue.products) >= 10_000
    assert len(catalogue.by_asin) == len(catalogue.products)
    goals = catalogue.goals
    assert len(goals["train"]) + len(goals["test"]) >= 5_000
    assert {g.goal_id for g in goals["train"]}.isdisjoint({g.goal_id for g in goals["test"]})
    tops = {p.product_category.split(" > ")[0] for p in catalogue.products}
    assert {"Beauty & Personal Care", "Grocery & Gourmet Food", "Electronics", "Home & Kitchen"} <= tops
    product = catalogue.products[0]
    assert product.title and product.price > 0 and product.attributes and product.options
    assert product.description and product.features and len(product.reviews) >= 2


def test_instructions_name_type_attributes_options_and_price():
    for goal in get_world().catalogue.goals["test"][:100]:
        text = goal.instruction
        assert goal.query in text and f"{goal.price_upper:.2f} dollars" in text
        assert all(a in text for a in goal.attributes) and all(v in text for v in goal.options.values())
        target = get_world().catalogue.by_asin[goal.asin]
        assert target.price <= goal.price_upper


def test_generation_is_deterministic():
    a, b = generate(300, 100, 20, seed=5), generate(300, 100, 20, seed=5)
    assert a.to_json() == b.to_json()
    assert generate(300, 100, 20, seed=6).to_json() != a.to_json()


def test_search_page_to_results_to_item_and_back(env):
    obs, info = env.reset(seed=0, options={"split": "test"})
    assert "[Search]" in obs and info["admissible_actions"] == ["search[<your query>]"]
    obs, reward, terminated, _, info = env.step("<action>search[wireless earbuds noise cancelling]</action>")
    assert info["page"] == "results" and "Page 1 of 5 (Total results: 50)" in obs and reward == 0.0
    items = [a[6:-1] for a in info["admissible_actions"] if a.startswith("click[B")]
    assert len(items) == 10 and "click[next >]" in info["admissible_actions"]
    obs, *_, info = env.step("<action>click[next >]</action>")
    assert "Page 2 of 5" in obs and "click[< prev]" in info["admissible_actions"]
    page2 = [a for a in info["admissible_actions"] if a.startswith("click[B")]
    assert set(page2).isdisjoint(f"click[{i}]" for i in items)
    obs, *_ = env.step("<action>click[< prev]</action>")
    assert "Page 1 of 5" in obs
    obs, *_, info = env.step(f"<action>click[{items[0].lower()}]</action>")  # ids are case-insensitive
    assert info["page"] == "item" and "[buy now]" in obs and "[description]" in obs
    option = next(a for a in info["admissible_actions"] if a not in (
        "click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
        "click[buy now]"))
    obs, *_ = env.step(f"<action>{option}</action>")
    assert f"[{option[6:-1]}] (selected)" in obs
    for sub in ("description", "features", "reviews"):
        obs, *_, info = env.step(f"<action>click[{sub}]</action>")
        assert info["page"] == sub
        obs, *_, info = env.step("<action>click[< prev]</action>")
        assert info["page"] == "item" and f"[{option[6:-1]}] (selected)" in obs  # options survive sub-pages
    obs, *_, info = env.step("<action>click[< prev]</action>")
    assert info["page"] == "results"
    obs, *_, info = env.step("<action>click[back to search]</action>")
    assert info["page"] == "search"


def test_unclickable_and_malformed_actions_get_clear_messages(env):
    env.reset(seed=1, options={"split": "test"})
    obs, _, _, _, info = env.step("<action>click[buy now]</action>")
    assert not info["action_valid"] and "not clickable on this page" in obs and "search[<your query>]" in obs
    env.step("<action>search[green tea]</action>")
    obs, _, _, _, info = env.step("<action>search[coffee]</action>")
    assert not info["action_valid"] and "no search box" in obs
    obs, _, _, _, info = env.step("<action>buy it now please</action>")
    assert not info["action_valid"] and "is not a command" in obs
    obs, _, _, _, info = env.step("<action>click[]</action>")
    assert not info["action_valid"] and "empty" in obs
    # a bare command is tolerated, and reasoning is ignored
    obs, _, _, _, info = env.step("<think>go on</think> click[next >]")
    assert info["action_valid"] and "Page 2" in obs


def test_one_reply_is_one_action_and_options_stay_with_their_item(env):
    env.reset(seed=3, options={"split": "test"})
    obs, _, _, _, info = env.step("<action>search[tea]</action><action>click[buy now]</action>")
    assert not info["action_valid"] and info["page"] == "search"
    obs, _, _, _, info = env.step("<action>search[tea] click[buy now]</action>")  # one search, for all of it
    assert info["action_valid"] and info["page"] == "results"
    first, second = [a for a in info["admissible_actions"] if a.startswith("click[B")][:2]
    env.step(f"<action>{first}</action>")
    _, reward, terminated, _, info = env.step("<action>click[< prev]\nclick[buy now]</action>")  # not a button
    assert not info["action_valid"] and not terminated and info["page"] == "item"
    option = next(a for a in info["admissible_actions"] if a not in (
        "click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
        "click[buy now]"))
    env.step(f"<action>{option}</action>")
    env.step("<action>click[< prev]</action>")
    env.step(f"<action>{second}</action>")
    _, reward, terminated, _, info = env.step("<action>click[buy now]</action>")
    assert terminated and env.unwrapped.frontend.session.options == {}  # the first item's option is gone
    assert env.unwrapped.frontend.session.reward_info.n_options == 0


def test_extract_command():
    assert extract_command("<action> search[ red  shoes ] </action>") == Command("search", "red shoes")
    assert extract_command("click[Buy Now]") == Command("click", "Buy Now")
    assert isinstance(extract_command("I will click[buy now] next"), str)
    assert isinstance(extract_command("<answer>click[x]</answer>"), str)


def test_buy_ends_episode_and_nothing_is_clickable_after(env):
    env.reset(seed=2, options={"split": "test"})
    terminated = False
    for _ in range(15):
        obs, reward, terminated, _, info = env.step(env.unwrapped.expert_action())
        if terminated:
            break
    assert terminated and reward == 1.0 and info["won"] and info["purchased"]
    assert "Your score (min 0.0, max 1.0): 1.0000" in obs and info["admissible_actions"] == []
    with pytest.raises(ResetNeeded, match=r"call reset\(\)"):  # Gymnasium's rule: a finished episode needs reset()
        env.step("<action>click[buy now]</action>")


def test_expert_wins_at_least_95_percent_of_test_instructions(env):
    episodes = [play_episode(env, expert_policy(env), seed=s, split="test") for s in range(200)]
    assert sum(e.won for e in episodes) >= 0.95 * len(episodes)
    assert max(e.num_steps for e in episodes) <= 15


def test_bad_split_and_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown split"):
        eppo_envs.make("eppo/WebShop-v0", split="valid")
    with pytest.raises(ValueError, match="not found"):
        eppo_envs.make("eppo/WebShop-v0", items_path=str(tmp_path / "nope.json"))
