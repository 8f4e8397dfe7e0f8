"""The admissible commands as a line of the observation (`eppo/ALFWorld-v0`'s `show_admissible` option).

ALFWorld agents built on LLMs (ReAct's prompts, verl-agent) show the model the commands possible right now each
turn: a small model then copies a listed `take X from Y` only when X is really there, instead of guessing one.
The list is the engine's own, in the engine's order (sorted), so a seed gives the same text every time.

Two forms. `"all"`: every command, verbatim. `"compact"`: the same list, except that the `go to` commands, which
in a kitchen are ~30 of ~40 entries and ~3/4 of the tokens, are said in one phrase when they are exactly "every
receptacle of the room" or "every receptacle but the one you are at" (the room's receptacles are the `go to`
targets of the first state, where the agent stands in the middle of the room and can go anywhere); in any other
state they are listed, so the line is always the whole truth.
"""

from __future__ import annotations

from collections.abc import Sequence

FORMS = ("all", "compact")
GO = "go to "


def admissible_line(admissible: Sequence[str], form: str, receptacles: frozenset[str]) -> str:
    """`Admissible commands: a, b, c.` for `admissible`; `receptacles`: the room's (for the compact form)."""
    commands = list(admissible)
    if form == "compact":
        targets = {a[len(GO):] for a in commands if a.startswith(GO)}
        missing = receptacles - targets
        if targets <= receptacles and len(missing) <= 1 and targets:
            phrase = "go to any receptacle" + (f" except {next(iter(missing))}" if missing else "")
            rest = [a for a in commands if not a.startswith(GO)]
            commands = [phrase, *rest]
    return "Admissible commands: " + ", ".join(commands) + "."


def room_receptacles(admissible: Sequence[str]) -> frozenset[str]:
    """The `go to` targets of the first state: every receptacle of the room."""
    return frozenset(a[len(GO):] for a in admissible if a.startswith(GO))
