"""`eppo/SearchQA-v0`: answer a question by searching a corpus, with Search-R1's protocol and reward.

The model reasons in `<think>`, searches with `<search>query</search>` and reads the top-k documents in
`<information>Doc 1 (Title: ...) ...</information>`, and ends with `<answer>...</answer>`. Reward is exact match
after Search-R1's normalisation (lower case, no punctuation or articles); token F1 is reported in `info`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eppo_envs.core import AgentEnv, StepResult, Tool, parse_tool_call
from eppo_envs.searchqa.answers import exact_match, f1_score
from eppo_envs.searchqa.corpus import Question
from eppo_envs.searchqa.expert import expert_reply
from eppo_envs.searchqa.sources import load_source
from eppo_envs.tools.retriever import Hit

MAX_DOC_CHARS = 600  # a retrieved passage is clipped so one search cannot flood the context

INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search up to {max_searches} times. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Write exactly one <search> or <answer> per turn."
)
# the same protocol with function calls (the tools format)
TOOLS_INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call the search tool with a "
    "query and it will return the top searched results between <information> and </information>. You can search "
    "up to {max_searches} times. If you find no further external knowledge needed, you can directly provide the "
    "answer with the answer tool, without detailed illustrations. For example, answer(answer=\"Beijing\"). Make "
    "exactly one tool call per turn."
)


def format_hits(hits: list[Hit]) -> str:
    if not hits:
        return "<information>No documents matched this query.</information>"
    lines = [f"Doc {i} (Title: {h.doc.title}) {h.doc.text[:MAX_DOC_CHARS]}" for i, h in enumerate(hits, 1)]
    return "<information>" + "\n".join(lines) + "</information>"


class SearchQAEnv(AgentEnv):
    task = "searchqa"
    tool_tags = ("search", "answer")
    reward_changes = (
        "2026-12-06: a NUL character in an answer no longer joins its neighbours ('Par\\x00is' had won for 'Paris')",
    )
    action_hint = "Reply with <search>query</search> to search, or <answer>final answer</answer> to answer."
    tools = (Tool("search", "Search the corpus; the top documents come back.", (("query", "what to search for"),),
                  "<search>{query}</search>"),
             Tool("answer", "Give the final answer (a few words, no explanation); the episode ends.",
                  (("answer", "the final answer"),), "<answer>{answer}</answer>"))

    def __init__(
        self,
        split: str = "train",
        corpus: str = "kb",
        backend: str = "bm25s",
        top_k: int = 3,
        max_searches: int = 4,
        max_turns: int | None = None,
        corpus_path: str | Path | None = None,
        qa_path: str | Path | dict[str, str | Path] | None = None,
        index_path: str | Path | None = None,
        render_mode: str | None = None,
        action_format: str = "tags",
    ) -> None:
        super().__init__(split, render_mode=render_mode, action_format=action_format)
        if top_k < 1 or max_searches < 0:
            raise ValueError(f"top_k must be >= 1 and max_searches >= 0 (got {top_k}, {max_searches})")
        self.source = load_source(corpus, backend, corpus_path, qa_path, index_path)
        self.top_k, self.max_searches = top_k, max_searches
        # Room for every search, the answer and two slips; after that the episode ends unanswered.
        self.max_turns = max_turns or max_searches + 3
        self.question: Question | None = None
        self.searches: list[tuple[str, list[str]]] = []
        self.turns = 0

    def num_instances(self, split: str) -> int:
        return len(self.source.questions.get(split, []))

    def instance_id(self, split: str, index: int) -> str:
        return f"searchqa/{self.source.questions[split][index].qid}"

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict[str, Any]]:
        self.question = self.source.questions[split][index]
        self.searches, self.turns = [], 0
        instruction = (TOOLS_INSTRUCTION if self.action_format == "tools" else INSTRUCTION).format(
            max_searches=self.max_searches)
        return instruction, f"Question: {self.question.question}", {"question": self.question.question,
                                                                     "corpus": self.source.name}

    def transition(self, text: str) -> StepResult:
        self.turns += 1
        call = parse_tool_call(text, self.tool_tags)
        if not call.valid:
            result = self.invalid(call.error)
        elif call.tag == "answer":
            return self._answer(call.content)
        elif len(self.searches) >= self.max_searches:
            result = self.invalid(f"you have used all {self.max_searches} searches; give your final answer now.")
        else:
            hits = self.source.retriever.search(call.content, self.top_k)
            self.searches.append((call.content, [h.doc.id for h in hits]))
            result = StepResult(format_hits(hits), info={"query": call.content, "searches": len(self.searches),
                                                         "retrieved": [h.doc.id for h in hits]})
        return self._turn_limit(result)

    def refuse(self, reason: str) -> StepResult:
        self.turns += 1  # a refused call is a turn, as an invalid tag reply is
        return self._turn_limit(self.invalid(reason))

    def _turn_limit(self, result: StepResult) -> StepResult:
        if self.turns >= self.max_turns:
            result.terminated = True
            result.observation += f"\nThe episode is over: the turn limit ({self.max_turns}) was reached without an answer."
            result.info.update(self._score(""))
        return result

    def _score(self, prediction: str) -> dict[str, Any]:
        assert self.question is not None
        return {"em": float(exact_match(prediction, self.question.answers)),
                "f1": f1_score(prediction, self.question.answers), "golden_answers": list(self.question.answers),
                "searches": len(self.searches)}

    def _answer(self, prediction: str) -> StepResult:
        info = {"answer": prediction, **self._score(prediction)}
        won = info["em"] == 1.0
        verdict = "Correct." if won else f"Incorrect. The expected answer was: {self.question.answers[0]}."
        return StepResult(verdict, reward=1.0 if won else 0.0, terminated=True, won=won, info=info)

    def expert_action(self) -> str:
        if self.question is None:
            return "<answer>unknown</answer>"
        return expert_reply(self.question, self.searches, self.max_searches)
