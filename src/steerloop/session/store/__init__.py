"""The session stores: the interface, the shared group committer and the backends.

``_interface`` (``SessionStore``, ``BufferedWriter``), ``_lease`` (``WriteLease``) ←
``_group`` (group commit and ``GroupWriter`` for the database stores) ← ``_memory``,
``sqlite``, ``postgres`` (backends) ← ``_open`` (``open_store``, which imports a database
backend only when its URL is opened).
"""

from .._codec import bulk_decoding, decode_log
from ._interface import (
    LOG_VERSION,
    BufferedWriter,
    SessionInfo,
    SessionStore,
    decode_rows,
    page_rows,
    stored_header,
)
from ._memory import MemoryStore
from ._open import open_store

__all__ = [
    "LOG_VERSION",
    "BufferedWriter",
    "MemoryStore",
    "SessionInfo",
    "SessionStore",
    "bulk_decoding",
    "decode_log",
    "decode_rows",
    "open_store",
    "page_rows",
    "stored_header",
]
