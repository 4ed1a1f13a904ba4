"""Stream completions from an OpenAI-compatible server and time every token.

    locust -f locustfiles/llm.py --host http://127.0.0.1:8000 [--llm-* options]

See `locust -f locustfiles/llm.py --help` (group "llmload") and docs/locust.md.
"""

from llmload.locustfile import LLMUser  # noqa: F401  (Locust picks up the user class)
