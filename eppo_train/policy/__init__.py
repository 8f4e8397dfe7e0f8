"""Generation backends (hf default, vllm, openai-compatible for evaluation) behind one interface."""
