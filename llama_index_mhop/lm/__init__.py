"""LM plumbing: DSPy signatures, LM clients, how a step calls an LM and falls back, programs on disk."""
