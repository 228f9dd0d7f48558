"""The pure layer: text and ranking rules, the LLM-free strategies, metrics and parsers (no heavy import)."""
