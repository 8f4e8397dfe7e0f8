"""The 120 AI2-THOR floorplans bundled in the `alfworld` package, as static rooms for the PDDL engine.

`alfworld/gen/layouts/FloorPlan<N>-openable.json` gives each receptacle's THOR id and the pose (x, z, rotation,
horizon) from which the agent interacts with it; `-objects.json` lists every object class in the room and
`-layout.npy` the navigable floor points. Receptacle classes a room has but whose pose the package does not ship
(stove burners, toasters, coffee machines, towel holders...) get a pose drawn from the navigable points, seeded by the
floorplan, so a room is the same in every problem that uses it. Only movable objects vary from problem to problem.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import alfworld.gen.constants as C
import numpy as np

LAYOUTS = Path(C.__file__).parent / "layouts"

# Held-out floorplans (ALFRED's unseen scenes: 6 of each of the four room types); the rest is seen in training.
UNSEEN_FLOORPLANS: tuple[int, ...] = tuple(sorted(C.TEST_SCENE_NUMBERS))
SEEN_FLOORPLANS: tuple[int, ...] = tuple(sorted(C.TRAIN_SCENE_NUMBERS))

STATIC_RECEPTACLES: frozenset[str] = frozenset(C.RECEPTACLES - C.MOVABLE_RECEPTACLES_SET)
# THOR names the basin inside a sink or tub "<Sink id>|SinkBasin"; ALFWorld shows it as "sinkbasin 1".
_BASINS = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
# Rooms have several burners at one stove; every other receptacle class missing from openable.json appears once.
_SYNTH_COUNT = {"StoveBurner": 4}


@dataclass(frozen=True)
class Receptacle:
    thor_id: str  # e.g. "Cabinet|+00.68|+00.50|-02.20"
    rtype: str  # e.g. "Cabinet"
    location: str  # "loc|x|z|rotation|horizon" in grid units, as ALFRED writes it

    @property
    def openable(self) -> bool:
        return self.rtype in C.OPENABLE_CLASS_SET


@dataclass(frozen=True)
class Scene:
    floorplan: int
    receptacles: tuple[Receptacle, ...]
    object_types: tuple[str, ...]  # every object class present in the room (receptacles included)
    free_points: tuple[tuple[int, int], ...]  # navigable grid points no receptacle is seen from (agent start)

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(r.rtype for r in self.receptacles)


def _location(x: float, z: float, rotation: float, horizon: float) -> str:
    return f"loc|{round(x / C.AGENT_STEP_SIZE)}|{round(z / C.AGENT_STEP_SIZE)}|{round(rotation / 90) % 4}|{round(horizon)}"


def _coord(value: float) -> str:
    return f"{value:+06.2f}"


@cache
def load_scene(floorplan: int) -> Scene:
    """The static room of one floorplan (deterministic: seeded by the floorplan number)."""
    stem = LAYOUTS / f"FloorPlan{floorplan}"
    poses: dict[str, list[float]] = json.loads(Path(f"{stem}-openable.json").read_text())
    object_types = tuple(json.loads(Path(f"{stem}-objects.json").read_text()))
    points = [(float(x), float(z)) for x, z in np.load(f"{stem}-layout.npy").tolist()]
    rng = random.Random(f"alfworld-scene-{floorplan}")

    receptacles: list[Receptacle] = []
    for thor_id, (x, z, rotation, horizon) in sorted(poses.items()):
        cls = thor_id.split("|", 1)[0]
        rtype = _BASINS.get(cls, cls)
        if rtype not in STATIC_RECEPTACLES:
            continue
        full_id = f"{thor_id}|{rtype}" if cls in _BASINS and not thor_id.endswith(rtype) else thor_id
        receptacles.append(Receptacle(full_id, rtype, _location(x, z, rotation, horizon)))

    used = {tuple(int(v) for v in r.location.split("|")[1:3]) for r in receptacles}
    grid = sorted({(round(x / C.AGENT_STEP_SIZE), round(z / C.AGENT_STEP_SIZE)) for x, z in points})
    free = [p for p in grid if p not in used]
    rng.shuffle(free)
    present = {r.rtype for r in receptacles}
    for cls in sorted(set(object_types)):
        rtype = _BASINS.get(cls, cls)
        if rtype not in STATIC_RECEPTACLES or rtype in present or not free:
            continue
        gx, gz = free.pop()
        rotation, y = rng.randrange(4), rng.uniform(0.3, 1.2)
        for k in range(_SYNTH_COUNT.get(rtype, 1)):
            # Burners of one stove sit side by side and are all reached from the same spot.
            x, z = gx * C.AGENT_STEP_SIZE + 0.2 * (k % 2), gz * C.AGENT_STEP_SIZE + 0.2 * (k // 2)
            thor_id = f"{rtype}|{_coord(x)}|{_coord(y)}|{_coord(z + 0.5)}"
            receptacles.append(Receptacle(thor_id, rtype, f"loc|{gx}|{gz}|{rotation}|30"))
        present.add(rtype)
    return Scene(floorplan, tuple(receptacles), object_types, tuple(sorted(free)))
