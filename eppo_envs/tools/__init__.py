"""Tools several tasks share: the retriever (search QA, WebShop) and the sandbox (math, code)."""
