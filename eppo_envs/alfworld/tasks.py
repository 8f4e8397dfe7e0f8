"""The six ALFWorld task types, chosen by name: what each needs from a room and how its goal reads.

Goals (PDDL) and the sentences of the task description come from `alfworld.gen.goal_library`, the same library
ALFWorld's own game files were written from; each type here only adds the rules that make a problem solvable
and not already solved (the appliance the type needs, the object classes it applies to, the parent it excludes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import alfworld.gen.constants as C
import alfworld.gen.goal_library as glib

from eppo_envs.alfworld.scenes import Scene

# Object classes a static receptacle can hold (ALFRED's placement rules); sliced variants are not generated.
CAN_CONTAIN: dict[str, frozenset[str]] = {
    r: frozenset(o for o in objs if not o.endswith("Sliced")) for r, objs in C.VAL_RECEPTACLE_OBJECTS.items()
}
PLACEABLE: frozenset[str] = frozenset().union(*CAN_CONTAIN.values())
# Where a desk lamp stands (a fixture: THOR does not list it as placeable, so ALFRED's rules say nothing).
LAMP = "DeskLamp"
LAMP_HOSTS: tuple[str, ...] = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")


@dataclass(frozen=True)
class TaskType:
    name: str  # ALFWorld's name, e.g. "pick_clean_then_place_in_recep"
    short: str  # e.g. "clean"
    objects: frozenset[str] | None = None  # object classes it applies to (None: any placeable)
    appliance: str | None = None  # receptacle class the task needs (sink basin, microwave, fridge)
    needs_two: bool = False
    needs_lamp: bool = False

    @property
    def goal_pddl(self) -> str:
        return glib.gdict[self.name]["pddl"]

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(glib.gdict[self.name]["templates"])

    def parents(self, scene: Scene, obj: str) -> list[str]:
        """Receptacle classes of `scene` that can take `obj` as the goal's parent."""
        if self.needs_lamp:
            return []
        return sorted(
            r for r in scene.receptacle_types
            if obj in CAN_CONTAIN.get(r, ()) and r != self.appliance
            # the object must start somewhere else than every receptacle of the parent class
            and any(obj in CAN_CONTAIN.get(o, ()) for o in scene.receptacle_types - {r})
        )

    def candidates(self, scene: Scene) -> list[tuple[str, str | None, str | None]]:
        """Every (object, parent, toggle) this type can be posed with in `scene`."""
        if self.appliance and self.appliance not in scene.receptacle_types:
            return []
        present = sorted(set(scene.object_types) & PLACEABLE)
        if self.objects is not None:
            present = [o for o in present if o in self.objects]
        if self.needs_lamp:
            if LAMP not in scene.object_types or not set(LAMP_HOSTS) & scene.receptacle_types:
                return []
            return [(o, None, LAMP) for o in present if any(o in CAN_CONTAIN.get(r, ()) for r in scene.receptacle_types)]
        return [(o, r, None) for o in present for r in self.parents(scene, o)]

    def describe(self, obj: str, parent: str | None, toggle: str | None, template: int) -> str:
        text = self.templates[template % len(self.templates)]
        return text.format(obj=obj.lower(), recep=(parent or "").lower(), toggle=(toggle or "").lower(), mrecep="")


TASK_TYPES: dict[str, TaskType] = {
    t.name: t
    for t in (
        TaskType("pick_and_place_simple", "pick"),
        TaskType("pick_two_obj_and_place", "pick_two", needs_two=True),
        TaskType("pick_clean_then_place_in_recep", "clean", frozenset(C.VAL_ACTION_OBJECTS["Cleanable"]), "SinkBasin"),
        TaskType("pick_heat_then_place_in_recep", "heat", frozenset(C.VAL_ACTION_OBJECTS["Heatable"]), "Microwave"),
        TaskType("pick_cool_then_place_in_recep", "cool", frozenset(C.VAL_ACTION_OBJECTS["Coolable"]), "Fridge"),
        TaskType("look_at_obj_in_light", "examine", needs_lamp=True),
    )
}

# ALFWorld's numbering of the types (its base_config.yaml `env.task_types: [1, 2, 3, 4, 5, 6]`).
TYPE_NUMBERS: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}


def select_types(chosen: str | int | Iterable[str | int] | None) -> frozenset[str] | None:
    """The task types a user chose, by name or by ALFWorld's number; None keeps all six."""
    if chosen is None:
        return None
    items = [chosen] if isinstance(chosen, (str, int)) else list(chosen)
    names = set()
    for item in items:
        name = None if isinstance(item, bool) else TYPE_NUMBERS.get(item) if isinstance(item, int) else item
        if name not in TASK_TYPES:
            known = ", ".join(f"{n} ({k})" for k, n in TYPE_NUMBERS.items())
            raise ValueError(f"unknown ALFWorld task type {item!r}; choose from {known}")
        names.add(name)
    if not names:
        raise ValueError("task_types is empty; leave it out to keep all six ALFWorld task types")
    return frozenset(names)

