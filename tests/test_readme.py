"""The README's python examples run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
    code = BLOCKS[index]
    exec(compile(code, f"README block {index}", "exec"), {"__name__": f"readme_{index}"})


# ---------------------------------------------------------------- the shell commands of README.md and docs/*.md
# test_readme_example_runs runs the python blocks; the shell blocks are hours of training, so each command is
# checked as far as it can be without running it: its tool's own parser takes the flags, and an eppo-train
# command's config and --set keys load. (A flag renamed in the code, or a config key, is caught here.)
DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]
MAKE_TARGETS = {"train": ["eppo-train", "pipeline"], "experiment": ["eppo-train", "study"],
                "experiment-quick": ["eppo-train", "study", "--quick"], "study-report": ["eppo-train", "study-report"],
                "eval": ["eppo-eval", "--policy", "latest", "--tasks", "all"], "bench": ["eppo-bench"]}


def _shell_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every eppo-* or `make <target> ARGS=...` line in a bash (or plain) block; synopsis lines
    (with `[...]` placeholders) are left out."""
    import shlex

    found = []
    for doc in DOCS:
        for lang, block in re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), re.DOTALL):
            if lang not in ("", "bash", "sh"):
                continue
            for line in block.replace("\\\n", " ").splitlines():
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:  # unbalanced quotes: prose in a plain block ("a run's"); a command is a failure
                    if line.strip().startswith(("eppo-", "make ")):
                        found.append((f"{doc.name}: {line.strip()}", [line.split()[0], "<unbalanced quotes>"]))
                    continue
                if words and words[0] == "make" and len(words) > 1 and words[1] in MAKE_TARGETS:
                    extra = next((shlex.split(w[5:]) for w in words if w.startswith("ARGS=")), [])
                    words = [*MAKE_TARGETS[words[1]], *extra]
                if words and words[0].startswith("eppo-") and not any(w.startswith("[") for w in words):
                    found.append((f"{doc.name}: {line.strip()}", words))
    return found


SHELL = _shell_commands()


def _parse(argv: list[str]):
    from eppo_envs.cli import build_parser as envs_parser
    from eppo_train.benchmarks.run import parse_args as bench_args
    from eppo_train.cli import build_parser as train_parser
    from eppo_train.eval.cli import build_parser as eval_parser

    tool, args = argv[0], argv[1:]
    if tool == "eppo-train" and (not args or args[0].startswith("-")):
        args = ["train", *args]  # what eppo-train's main does
    parsers = {"eppo-train": train_parser().parse_args, "eppo-eval": eval_parser().parse_args,
               "eppo-envs": envs_parser().parse_args, "eppo-bench": bench_args}
    return tool, parsers[tool](args)


def test_the_docs_show_shell_commands():
    assert len(SHELL) > 40 and {argv[0] for _, argv in SHELL} >= {"eppo-train", "eppo-eval", "eppo-bench"}


@pytest.mark.parametrize("where, argv", SHELL, ids=[w for w, _ in SHELL])
def test_doc_command_parses_and_its_config_loads(where, argv):
    from eppo_train.config import load_config

    tool, args = _parse(argv)  # an unknown flag exits 2 here
    if tool != "eppo-train" or not hasattr(args, "overrides") or getattr(args, "resume", None):
        return
    config = args.config or {"train": None, "study": "study-quick" if getattr(args, "quick", False) else "study"}.get(
        args.command, "pipeline")
    load_config(config, args.overrides)  # a config name or --set key the code no longer has raises ConfigError


def test_the_make_table_lists_every_target():
    # the table ends with "`make help` | this list"; every target with a `##` help line is in it
    makefile = (README.parent / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):.*## ", makefile, re.M))
    section = README.read_text().split("## Make targets", 1)[1].split("\n## ", 1)[0]
    assert targets == set(re.findall(r"`make ([a-z-]+)", section)), targets ^ set(re.findall(r"`make ([a-z-]+)", section))


# ---------------------------------------------------------------- the python blocks of docs/*.md
# Each doc's blocks run in order in one namespace, as a reader pastes them; a block that cannot run here is listed
# with the reason, so a new block is either run or explained (sandbox.md's `box.run(code)` named an undefined
# `code`).
DOC_BLOCKS = {doc.name: re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL) for doc in DOCS[1:]}
NOT_RUN = {
    ("alfworld.md", 3): "needs the official ALFWorld data (data_path)",
    ("bench.md", 0): "a sketch of the engine API: prompt_ids and learner are the caller's",
    ("eval.md", 0): "64 episodes of the default model on transformers: over 9 minutes on 2 cores",
    ("interop.md", 0): "needs a live server: test_remote.py::test_interop_doc_snippets_run_against_a_real_server",
    ("interop.md", 1): "needs a live server: test_remote.py::test_interop_doc_snippets_run_against_a_real_server",
    ("searchqa.md", 0): "names the user's own corpus and QA files",
}


def test_every_doc_python_block_is_run_or_explained():
    blocks = {(name, i) for name, found in DOC_BLOCKS.items() for i in range(len(found))}
    assert set(NOT_RUN) <= blocks, set(NOT_RUN) - blocks  # a stale entry (the block moved or went)
    assert len(blocks - set(NOT_RUN)) >= 5


@pytest.mark.parametrize("name", [n for n, found in DOC_BLOCKS.items()
                                  if any((n, i) not in NOT_RUN for i in range(len(found)))])
def test_doc_python_blocks_run(name):
    namespace = {"__name__": f"doc_{name}"}
    for i, code in enumerate(DOC_BLOCKS[name]):
        if (name, i) not in NOT_RUN:
            exec(compile(code, f"{name} block {i}", "exec"), namespace)


def test_alfworld_doc_eval_block_runs(tmp_path):
    # the block wrote its module into /tmp/alfmod without creating the folder: "No such file or directory"
    import json
    import subprocess
    import sys

    block = next(b for b in re.findall(r"```bash\n(.*?)```", (README.parent / "docs" / "alfworld.md").read_text(),
                                       re.DOTALL) if "alf_listed" in b)
    # the block's PYTHONPATH replaces the caller's: the checkout under test goes first, or an installed eppo_train
    # answers (a broken `python -m eppo_train.eval` in a worktree passed here on the main checkout's code)
    script = (block.replace("/tmp/alfmod", str(tmp_path / "alfmod")).replace("runs/<run>/sft", "expert")
              .replace("PYTHONPATH=", f"PYTHONPATH={README.parent}:")
              .replace("--episodes 32", "--episodes 1 --no-progress").replace("python -m", f"{sys.executable} -m"))
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["tasks"]["probe/ALFWorldListed-v0"]["success"] == 1.0


@pytest.mark.parametrize("doc", [README.parent / "docs" / "training.md"], ids=lambda p: p.name)
def test_the_config_table_names_every_key(doc):
    # the README said "Every key:"; its table lacked 16 (run.eval_every, the ray placement keys, algo.options, ...).
    # The table now lives in docs/training.md alone; the README links to it.
    import dataclasses

    from eppo_train.config import Config, TaskConfig

    text = doc.read_text()
    for section in dataclasses.fields(Config):
        row = re.search(rf"^\| `{section.name}` \|(.*)\|$", text, re.M)
        assert row, f"{doc.name}: no row for {section.name}"
        named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]*)`", row.group(1)))))
        keys = {f.name for f in dataclasses.fields(getattr(Config(), section.name))}
        if section.name == "env":
            keys |= {f.name for f in dataclasses.fields(TaskConfig)}
        assert keys <= named, f"{doc.name}, {section.name}: {sorted(keys - named)}"


def test_the_run_directory_section_names_what_the_trainer_writes():
    # docs/training.md's "A run directory" names every file the trainer writes (placement.json, evals/ included)
    root = README.parent
    names = set(re.findall(r'run_dir / "([^"]+)"', (root / "eppo_train" / "trainer.py").read_text()))
    section = (root / "docs" / "training.md").read_text().split("## A run directory", 1)[1].split("\n## ", 1)[0]
    assert names and names <= set(re.findall(r"[\w.]+", section)), names - set(re.findall(r"[\w.]+", section))


def test_make_messages_quoted_in_the_docs_name_the_targets_recipe_line():
    # e.g. docs/pipeline.md's `make: *** [Makefile:<line>: train] Interrupt`: the line must be the recipe's
    lines = (README.parent / "Makefile").read_text().splitlines()
    for doc in DOCS:
        for line, target in re.findall(r"Makefile:(\d+): ([\w-]+)\]", doc.read_text()):
            assert lines[int(line) - 2].startswith(f"{target}:"), f"{doc.name}: Makefile:{line} is not {target}'s recipe"
