"""ragstream: keep a retrieval index in sync with document folders.

Public API (floor 4, the face):

    import ragstream
    report = ragstream.sync(["docs/"], data_dir=".ragstream")
    print(ragstream.status(data_dir=".ragstream"))
"""

from ragstream.api import gc, load_settings, status, sync, watch
from ragstream.client import Client

__all__ = ["Client", "gc", "load_settings", "status", "sync", "watch"]
