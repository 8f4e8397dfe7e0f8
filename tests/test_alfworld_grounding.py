"""`grounding.pddl2sas` (the fast relaxed exploration, then `strips_sas`'s stages or fast_downward's) gives
fast_downward's SAS text byte for byte."""

from __future__ import annotations

import fast_downward
import pytest

from eppo_envs.alfworld import grounding, strips_sas
from eppo_envs.alfworld.differential import SPLITS
from eppo_envs.alfworld.generator import game_file, load_specs
from eppo_envs.alfworld.tasks import TASK_TYPES
from eppo_envs.alfworld.translation import ArgvGuard


@pytest.fixture
def fast_path_results(monkeypatch):
    """What each strips_sas.translate call returned (None: it handed the task back to fast_downward's stages)."""
    results: list = []

    def spy(*args):
        results.append(real(*args))
        return results[-1]

    real = strips_sas.translate
    monkeypatch.setattr(strips_sas, "translate", spy)
    return results


def _same_sas(split: str, index: int, results: list) -> str:
    spec = load_specs(split)[index]
    game = game_file(spec, f"{split}_{index}")
    with ArgvGuard():
        task, stock = fast_downward.pddl2sas(game["pddl_domain"], game["pddl_problem"], optimize=False)
    ours_task, ours = grounding.pddl2sas(game["pddl_domain"], game["pddl_problem"])
    assert results and results.pop() is not None, "strips_sas handed an ALFWorld game back to fast_downward's stages"
    assert ours == stock, f"{split}[{index}] {spec.task_type}: SAS text differs (strips_sas stages)"
    assert "begin_operator" in ours and [o.name for o in ours_task.objects] == [o.name for o in task.objects]
    # the fallback: the fast exploration, then fast_downward's own later stages
    _, generic = grounding.pddl2sas(game["pddl_domain"], game["pddl_problem"], fast_stages=False)
    assert generic == stock, f"{split}[{index}] {spec.task_type}: SAS text differs (fast_downward's stages)"
    assert "begin_rule" in ours  # the goal's axiom, translated by fast_downward's axiom code
    return spec.task_type


def test_sas_text_is_fast_downwards_for_every_task_type(fast_path_results, monkeypatch):
    handed_over = []  # operators strips_sas gives to fast_downward's translate_strips_operator (ToggleObject's
    real = strips_sas._Translator._fast_downwards  # conditional effects, in the desk-lamp task)

    def spy(self, action, mapping):
        handed_over.append(action.name)
        return real(self, action, mapping)

    monkeypatch.setattr(strips_sas._Translator, "_fast_downwards", spy)
    # the validation splits (train's rooms are the largest: ~1-4 s a translation; the slow test and the
    # differential sample cover them)
    seen = {_same_sas(("valid_unseen", "valid_seen")[n % 2], 6 * (n + 3) + n, fast_path_results)
            for n in range(len(TASK_TYPES))}
    assert "toggleobject" in handed_over
    assert seen == set(TASK_TYPES)  # spec lists alternate the six types (index % 6)


@pytest.mark.slow
def test_sas_text_is_fast_downwards_on_every_split_and_type(fast_path_results):
    seen = {(split, _same_sas(split, 6 * k + n, fast_path_results)) for split in SPLITS for n in range(len(TASK_TYPES))
            for k in (1, 9)}
    assert len(seen) == len(SPLITS) * len(TASK_TYPES)


def _model(rules, facts):
    model = grounding._Model([grounding._Rule(conds, head) for conds, head in rules])
    for pred, args in facts:
        model.add(pred, args)
    model.run()
    return model.known


def test_model_is_the_least_fixpoint():
    # transitive closure (recursion), a constant in a condition, a repeated variable, a 0-ary head
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")]
    rules = [
        ([("edge", ("?x", "?y"))], ("path", ("?x", "?y"))),
        ([("path", ("?x", "?y")), ("edge", ("?y", "?z"))], ("path", ("?x", "?z"))),
        ([("path", ("?x", "?x"))], ("cycle", ("?x",))),
        ([("path", ("a", "?y")), ("cycle", ("?y",))], ("a-reaches-cycle", ())),
        ([("path", ("?x", "?y")), ("never", ("?y",))], ("unreachable", ("?x",))),
    ]
    known = _model(rules, [("edge", e) for e in edges])
    paths = {args for pred, args in known if pred == "path"}
    closure = set(edges)
    while True:
        more = {(x, z) for x, y in closure for y2, z in closure if y == y2} - closure
        if not more:
            break
        closure |= more
    assert paths == closure
    assert {args for pred, args in known if pred == "cycle"} == {("b",), ("c",), ("d",)}
    assert ("a-reaches-cycle", ()) in known
    assert not any(pred == "unreachable" for pred, _ in known)


def test_free_head_variable_is_left_to_fast_downward():
    with pytest.raises(grounding._Unsupported):  # pddl_to_sas then uses fast_downward's own exploration
        grounding._Rule([("p", ("?x",))], ("q", ("?x", "?y")))
