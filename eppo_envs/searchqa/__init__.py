"""Search QA (Search-R1 protocol) over a fictional knowledge base, WordNet, or the user's corpus.

    env = eppo_envs.make("eppo/SearchQA-v0")                       # fictional KB, bm25s, top-3, 4 searches
    env = eppo_envs.make("eppo/SearchQA-v0", corpus="wordnet", backend="lucene")
"""

import eppo_envs

eppo_envs.register(
    "eppo/SearchQA-v0",
    entry_point="eppo_envs.searchqa.env:SearchQAEnv",
    task="searchqa",
    description="Answer questions by searching a corpus (Search-R1 protocol, exact-match reward)",
)
