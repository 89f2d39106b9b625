"""The one way evaluation and training open an index: the served index's engine
(`service.served.open_served`, what the CLI, HTTP, MCP and the embedded `Client` answer
through), with the retrieval log off.

Evaluation questions are not queries anyone asked the index, so they are not logged. A
variant over the same open stores with other settings (an ablation row) is
`QueryEngine.configured` on the engine opened here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragstream.core.settings import Settings
from ragstream.query.engine import QueryEngine
from ragstream.service.served import open_served


def quiet_settings(settings: Settings, judge: Path | str | None = None) -> Settings:
    """`settings` with the retrieval log off (these are not queries anyone asked), reading
    with the answer judge in `judge` and the decision beside it (None: the settings' own)."""
    update: dict[str, object] = {"log_queries": False}
    if judge is not None:
        update["answerable"] = settings.query.answerable.model_copy(update={"judge": str(judge)})
    return settings.model_copy(update={"query": settings.query.model_copy(update=update)})


@contextmanager
def opened(settings: Settings, judge: Path | str | None = None) -> Iterator[QueryEngine]:
    """The served index's engine over the data dir of `settings` (every side, the lexical
    index, the query models), with `quiet_settings`; the stores close on exit."""
    with open_served(quiet_settings(settings, judge)) as index:
        yield index.engine
