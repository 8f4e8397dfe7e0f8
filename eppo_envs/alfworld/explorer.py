"""An expert that finds things the way a model has to: by looking (`eppo/ALFWorld-v0`'s `expert="explorer"`).

The planner (`expert="planner"`, the default) plans on the full state, so it walks straight to where the object
is, which nothing the model has seen tells it; imitating it teaches "go somewhere, then take the target" whatever
the observation says. The explorer uses only what an agent knows: the goal (object and parent classes, the task
type), the room's receptacles (the first observation) and what each step showed (its admissible commands).

- Find: visit the receptacles that can hold the target's class (ALFRED's placement rules, `tasks.CAN_CONTAIN`),
  never one of the parent class (a target there would already be in place), in a fixed order (open surfaces
  before cabinets, drawers and other things that open, as a look costs one turn there and two here; then class,
  then number); open a closed one on arrival; take a target object when a `take` command for it is admissible.
- Finish, holding it: for clean/heat/cool go to the first sink basin/microwave/fridge and apply it; for the lamp
  task look for a lamp (receptacles of the classes a desk lamp stands on) and use it; else go to the first
  receptacle of the parent class (the same one for both objects of a pick-two task), open it if closed, move the
  object in. Hands empty and the goal unmet (pick two): find again.

Whenever the expected command is not admissible (an unusual game, a state the explorer did not lead to) it
returns None and the env's planner takes over, so the expert always reaches the goal when the planner can.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import alfworld.gen.constants as C

from eppo_envs.alfworld.tasks import CAN_CONTAIN, LAMP_HOSTS

# receptacle class as the text names it ("countertop") -> object classes it can hold ("apple", ...)
_HOLDS: dict[str, frozenset[str]] = {r.lower(): frozenset(o.lower() for o in objs) for r, objs in CAN_CONTAIN.items()}
_OPENABLE = frozenset(c.lower() for c in C.OPENABLE_CLASS_LIST)
_LAMP_HOSTS = frozenset(h.lower() for h in LAMP_HOSTS)
# task type -> (verb, appliance class) of the step between taking and placing
_TRANSFORM = {"pick_clean_then_place_in_recep": ("clean", "sinkbasin"),
              "pick_heat_then_place_in_recep": ("heat", "microwave"),
              "pick_cool_then_place_in_recep": ("cool", "fridge")}
LOOK = "look_at_obj_in_light"


def game_params(game: str | dict[str, Any]) -> dict[str, Any]:
    """The game file's `pddl_params` (object_target, parent_target, ...), or {} when it has none."""
    if isinstance(game, dict):
        data = game
    else:
        try:
            data = json.loads(Path(game).read_text())
        except (OSError, ValueError):
            return {}
    params = data.get("pddl_params")
    return params if isinstance(params, dict) else {}


def recep_class(name: str) -> str:
    """`"countertop 2"` -> `"countertop"`."""
    return name.rsplit(" ", 1)[0]


def _order(receptacles: frozenset[str]) -> list[str]:
    def key(name: str) -> tuple[bool, str, int]:
        tail = name.rsplit(" ", 1)[-1]
        return recep_class(name) in _OPENABLE, recep_class(name), int(tail) if tail.isdigit() else 0
    return sorted(receptacles, key=key)


class Explorer:
    """One episode's memory; `next_command` says what to do, or None to let the planner act."""

    def __init__(self, task_type: str, obj: str, parent: str, receptacles: frozenset[str]) -> None:
        self.task_type = task_type
        self.obj = obj.lower()
        self.parent = parent.lower()
        order = _order(receptacles)
        can = [r for r in order if self.obj in _HOLDS.get(recep_class(r), frozenset())]
        self.order = [r for r in (can or order) if recep_class(r) != self.parent]
        self.lamp_order = [r for r in order if recep_class(r) in _LAMP_HOSTS]
        self.parents = [r for r in order if recep_class(r) == self.parent]
        verb_appliance = _TRANSFORM.get(task_type)
        self.verb, appliance = verb_appliance if verb_appliance else ("", "")
        self.appliances = [r for r in order if recep_class(r) == appliance]
        self.visited: set[str] = set()
        self.opened: set[str] = set()
        self.seen: dict[str, list[str]] = {}  # receptacle -> the `take <target> from it` commands it showed
        self.lamps: dict[str, str] = {}  # receptacle -> the `use desklamp N` admissible there
        self.transformed: set[str] = set()  # objects cleaned/heated/cooled
        self.at: str | None = None
        self.holding: str | None = None  # the target object in hand ("apple 1"), from the commands applied
        self._take = re.compile(rf"^take ({re.escape(self.obj)} \d+) from (.+)$")
        self._move = re.compile(rf"^move ({re.escape(self.obj)} \d+) to ")

    def observe(self, command: str, admissible: list[str]) -> None:
        """Record an applied command and the admissible commands after it."""
        if command.startswith("go to "):
            self.at = command[len("go to "):]
            self.visited.add(self.at)
        elif command.startswith("open "):
            self.opened.add(command[len("open "):])
        elif (m := self._take.match(command)) is not None:
            self.holding = m.group(1)
        elif self._move.match(command):
            self.holding = None
        elif self.verb and command.startswith(f"{self.verb} "):
            self.transformed.add(command[len(self.verb) + 1:].split(" with ", 1)[0])
        if self.at is None:
            return
        if recep_class(self.at) != self.parent:
            self.seen[self.at] = [a for a in admissible if (m := self._take.match(a)) and m.group(2) == self.at]
        lamp = [a for a in admissible if a.startswith("use desklamp ")]
        if lamp:
            self.lamps[self.at] = lamp[0]

    def _go_or_open(self, place: str, admissible: list[str]) -> str | None:
        if self.at != place:
            return f"go to {place}" if f"go to {place}" in admissible else None
        if f"open {place}" in admissible and place not in self.opened:
            return f"open {place}"
        return ""  # there, and open: the caller acts

    def next_command(self, admissible: list[str]) -> str | None:
        return self._finish(self.holding, admissible) if self.holding else self._find(admissible)

    def _find(self, admissible: list[str]) -> str | None:
        here = [a for a in self.seen.get(self.at or "", []) if a in admissible]
        if here:
            return here[0]
        if self.at is not None and f"open {self.at}" in admissible and self.at not in self.opened \
                and self.at in self.order:
            return f"open {self.at}"
        for place in self.order:  # a target seen earlier, then the next receptacle not yet visited
            if self.seen.get(place) and place != self.at and f"go to {place}" in admissible:
                return f"go to {place}"
        for place in self.order:
            if place not in self.visited and f"go to {place}" in admissible:
                return f"go to {place}"
        return None

    def _finish(self, held: str, admissible: list[str]) -> str | None:
        if self.verb and held not in self.transformed:
            if not self.appliances:
                return None
            return self._there_then(self.appliances[0], f"{self.verb} {held} with {self.appliances[0]}", admissible)
        if self.task_type == LOOK:
            if self.at in self.lamps and self.lamps[self.at] in admissible:
                return self.lamps[self.at]
            for place in list(self.lamps) + [p for p in self.lamp_order if p not in self.visited]:
                if place != self.at and f"go to {place}" in admissible:
                    return f"go to {place}"
            return None
        if not self.parents:
            return None
        return self._there_then(self.parents[0], f"move {held} to {self.parents[0]}", admissible)

    def _there_then(self, place: str, command: str, admissible: list[str]) -> str | None:
        """Go to (and open) `place` first; once there, `command` if it is possible."""
        step = self._go_or_open(place, admissible)
        if step != "":
            return step
        return command if command in admissible else None
