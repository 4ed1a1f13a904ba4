"""llmload: speed-test matrices for OpenAI-compatible LLM servers, built on Locust."""

__version__ = "0.1.0"
