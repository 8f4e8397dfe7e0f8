"""The pace testbed: four cheap tasks of graded difficulty for studying multi-task entropy dynamics.

Multi-task GRPO trains tasks that learn at different paces: an easy task's entropy collapses within a few updates
while a hard one's stays high, and the tasks' entropy curves cross and spike. The testbed gives that mix in
minutes on a CPU with the default model, so that a study of many seeds is affordable:

    testbed/Echo-v0   repeat a made-up word (easy: learned in a few updates)
    testbed/Add-v0    add two numbers of `digits` digits, a second try after a wrong answer (graded by digits)
    testbed/Sort-v0   sort `letters` letters alphabetically, a second try after a wrong answer (hard)
    testbed/Guess-v0  find a number in 1..`high` from higher/lower feedback (multi-turn, exploration)

Importing this package registers them (`env.imports: [eppo_envs.testbed]`, as a user's own task would be). Each is
reproducible from (split, seed), has an expert that wins every instance, and passes the conformance suite.
"""

from eppo_envs.testbed import add, echo, guess, sort_letters  # noqa: F401  (registers the four tasks)
