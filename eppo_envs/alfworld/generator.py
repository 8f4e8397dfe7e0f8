"""Generated ALFWorld problems: a compact spec per problem, rendered into a game file on demand.

A `ProblemSpec` (floorplan, task type, object, parent, lamp, seed, sentence) is all a problem is. Rendering it gives
the PDDL problem (every receptacle of the room; one to three of the target class, two or three for pick-two, and
none or one to three of each other object class the room holds, placed by ALFRED's receptacle rules; the agent on
a free floor point; the goal from `alfworld.gen.goal_library`) and a game file in ALFWorld's own JSON format
`{"pddl_domain", "grammar", "pddl_problem", "solvable"}` whose grammar carries the task sentence, exactly as
`alfworld-generate` writes them. Spec lists are sampled once per split, stored in the cache, and are deterministic
from `SPEC_SEED`; rendering is deterministic from the spec.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import alfworld
import alfworld.gen.constants as C

from eppo_envs.alfworld.scenes import (
    SEEN_FLOORPLANS,
    STATIC_RECEPTACLES,
    UNSEEN_FLOORPLANS,
    Receptacle,
    load_scene,
)
from eppo_envs.alfworld.tasks import CAN_CONTAIN, LAMP, LAMP_HOSTS, PLACEABLE, TASK_TYPES, TaskType
from eppo_envs.core.cache import cached_dir

DATA_DIR = Path(alfworld.__file__).parent / "data"
SPEC_SEED = 20240501
CACHE_NAME = "alfworld/problems-v1"
# Split sizes: ALFWorld's train has 3,553 games; its valid splits 140 and 134 (ours: 140 each, all six types).
SPLIT_SIZES: dict[str, int] = {"train": 3553, "valid_seen": 140, "valid_unseen": 140}
SPLIT_FLOORPLANS: dict[str, tuple[int, ...]] = {
    "train": SEEN_FLOORPLANS,
    "valid_seen": SEEN_FLOORPLANS,
    "valid_unseen": UNSEEN_FLOORPLANS,
}
TYPE_ORDER: tuple[str, ...] = tuple(TASK_TYPES)

# THOR ids become PDDL names the way ALFRED mangles them (alfworld's Demangler reverses this for display).
_MANGLE = (("-", "_minus_"), ("#", "-"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))
_OTYPES = sorted(C.OBJECTS_SET - STATIC_RECEPTACLES)


def mangle(text: str) -> str:
    for old, new in _MANGLE:
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class ProblemSpec:
    floorplan: int
    task_type: str
    obj: str
    parent: str | None
    toggle: str | None
    seed: int
    template: int

    @property
    def task(self) -> TaskType:
        return TASK_TYPES[self.task_type]

    @property
    def description(self) -> str:
        return self.task.describe(self.obj, self.parent, self.toggle, self.template)


@dataclass(frozen=True)
class Placed:
    thor_id: str
    otype: str
    host: Receptacle


@lru_cache(maxsize=1)
def domain_text() -> str:
    return (DATA_DIR / "alfred.pddl").read_text()


@lru_cache(maxsize=1)
def grammar_template() -> str:
    return (DATA_DIR / "alfred.twl2").read_text()


def _near(host: Receptacle, rng: random.Random) -> str:
    x, y, z = (float(v) for v in host.thor_id.split("|")[1:4])
    x, y, z = x + rng.uniform(-0.3, 0.3), y + rng.uniform(0.0, 0.1), z + rng.uniform(-0.3, 0.3)
    return f"{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"


def place_objects(spec: ProblemSpec) -> list[Placed]:
    """Movable objects of the room, each in a receptacle that can hold it; the goal is never already met."""
    scene = load_scene(spec.floorplan)
    rng = random.Random(spec.seed)
    placed: list[Placed] = []
    if spec.toggle:  # the lamp is a fixture: the same host in every problem of this floorplan
        hosts = [r for r in scene.receptacles if r.rtype in LAMP_HOSTS]
        host = random.Random(f"alfworld-lamp-{spec.floorplan}").choice(hosts)
        placed.append(Placed(f"{LAMP}|{_near(host, rng)}", LAMP, host))
    for otype in sorted(set(scene.object_types) & PLACEABLE):
        hosts = [r for r in scene.receptacles if otype in CAN_CONTAIN.get(r.rtype, ())]
        if otype == spec.obj:
            hosts = [r for r in hosts if r.rtype not in (spec.parent, spec.task.appliance)] or hosts
            count = rng.randint(2, 3) if spec.task.needs_two else rng.randint(1, 3)
        else:
            count = rng.randint(1, 3) if rng.random() < 0.7 else 0
        for _ in range(count if hosts else 0):
            host = rng.choice(hosts)
            placed.append(Placed(f"{otype}|{_near(host, rng)}", otype, host))
    return placed


def render_problem(spec: ProblemSpec, name: str, focus: bool = False) -> str:
    """The PDDL problem text of `spec`; with `focus`, only the objects the goal is about are kept.

    The focused problem is what the expert plans on: A* in the full room (dozens of objects that can all be picked
    up) can take minutes on a pick-two task, while a plan without the bystanders is found at once and stays valid in
    the full game (nothing in the domain limits how much a receptacle holds, so bystanders never block a step).
    """
    scene = load_scene(spec.floorplan)
    rng = random.Random(spec.seed ^ 0x5EED)
    gx, gz = rng.choice(scene.free_points) if scene.free_points else (0, 0)
    start = f"loc|{gx}|{gz}|{rng.randrange(4)}|30"
    objects = place_objects(spec)
    if focus:
        objects = [o for o in objects if o.otype in (spec.obj, spec.toggle)]
    locations = sorted({r.location for r in scene.receptacles} | {start})

    decl = ["agent1 - agent"]
    decl += [f"{t}Type - otype" for t in _OTYPES]
    decl += [f"{t}Type - rtype" for t in sorted(STATIC_RECEPTACLES)]
    decl += [f"{mangle(o.thor_id)} - object" for o in objects]
    decl += [f"{mangle(r.thor_id)} - receptacle" for r in scene.receptacles]
    decl += [f"{mangle(loc)} - location" for loc in locations]

    init = [f"(atLocation agent1 {mangle(start)})"]
    for r in scene.receptacles:
        rid = mangle(r.thor_id)
        init += [f"(receptacleType {rid} {r.rtype}Type)", f"(receptacleAtLocation {rid} {mangle(r.location)})"]
        if r.openable:
            init.append(f"(openable {rid})")
    for o in objects:
        oid = mangle(o.thor_id)
        init += [f"(objectType {oid} {o.otype}Type)", f"(objectAtLocation {oid} {mangle(o.host.location)})",
                 f"(inReceptacle {oid} {mangle(o.host.thor_id)})"]
        if o.otype == LAMP:
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        for flag, group in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                            ("sliceable", "Sliceable")):
            if o.otype in C.VAL_ACTION_OBJECTS[group]:
                init.append(f"({flag} {oid})")
        if o.otype in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {oid})")
    otypes = sorted({o.otype for o in objects})
    for rtype in sorted(scene.receptacle_types):
        init += [f"(canContain {rtype}Type {t}Type)" for t in otypes if t in CAN_CONTAIN.get(rtype, ())]

    goal = spec.task.goal_pddl.format(obj=spec.obj, recep=spec.parent or "", toggle=spec.toggle or "", mrecep="")
    goal = "\n".join(line.rstrip() for line in mangle(goal).strip().splitlines())
    nl = "\n        "
    return (f"(define (problem {name})\n    (:domain alfred)\n    (:objects\n        {nl.join(decl)}\n    )\n"
            f"    (:init\n        {nl.join(init)}\n    )\n\n    {goal}\n")


def game_file(spec: ProblemSpec, name: str = "generated") -> dict[str, Any]:
    """A game file in ALFWorld's JSON format, plus the metadata the grammar's task sentence came from."""
    grammar = grammar_template().replace("UNKNOWN GOAL", spec.description)
    return {
        "pddl_domain": domain_text(),
        "grammar": grammar,
        "pddl_problem": render_problem(spec, name),
        "solvable": True,
        "task_type": spec.task_type,
        "pddl_params": {"object_target": spec.obj, "parent_target": spec.parent or "",
                        "toggle_target": spec.toggle or "", "mrecep_target": "", "object_sliced": False},
        "eppo_spec": asdict(spec),
    }


def sample_specs(split: str, count: int, seed: int = SPEC_SEED) -> list[ProblemSpec]:
    """`count` problems on the split's floorplans, the six task types in turn (only where a room allows a type)."""
    rng = random.Random(f"alfworld/{split}/{seed}")
    pools: dict[str, list[int]] = {
        name: [fp for fp in SPLIT_FLOORPLANS[split] if task.candidates(load_scene(fp))]
        for name, task in TASK_TYPES.items()
    }
    specs = []
    for i in range(count):
        name = TYPE_ORDER[i % len(TYPE_ORDER)]
        floorplan = rng.choice(pools[name])
        obj, parent, toggle = rng.choice(TASK_TYPES[name].candidates(load_scene(floorplan)))
        specs.append(ProblemSpec(floorplan, name, obj, parent, toggle, rng.getrandbits(31), rng.randrange(2)))
    return specs


def _build(folder: Path) -> None:
    for split, count in SPLIT_SIZES.items():
        lines = (json.dumps(asdict(s), sort_keys=True) for s in sample_specs(split, count))
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


@cache
def load_specs(split: str) -> tuple[ProblemSpec, ...]:
    """The split's problem specs (sampled into the cache on first use)."""
    folder = cached_dir(CACHE_NAME, _build)
    return tuple(ProblemSpec(**json.loads(line)) for line in (folder / f"{split}.jsonl").read_text().splitlines())


def export_games(specs: list[ProblemSpec], root: Path, split: str) -> list[Path]:
    """Write specs as game files in ALFWorld's directory layout (`<root>/json_2.1.1/<split>/<task>/<trial>/`)."""
    paths = []
    for i, spec in enumerate(specs):
        task_dir = f"{spec.task_type}-{spec.obj}-None-{spec.parent or spec.toggle}-{spec.floorplan}"
        folder = root / "json_2.1.1" / split / task_dir / f"trial_eppo_{i:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "game.tw-pddl"
        path.write_text(json.dumps(game_file(spec, f"plan_{i}")))
        paths.append(path)
    return paths
