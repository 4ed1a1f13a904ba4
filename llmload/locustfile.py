"""The llmload locustfile (inside the package, so installed copies and workers find it).

`locust -f locustfiles/llm.py --host URL` (headless, web UI, --master/--worker) uses this
through the thin `locustfiles/llm.py`; `llmload run --workers N` starts its worker
processes with it.
"""

from locust import events

from llmload.loadgen.plugin import install
from llmload.loadgen.user import LLMUser

install(events)

__all__ = ["LLMUser"]
