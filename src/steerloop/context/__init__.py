"""Long sessions: durable context compaction, token estimates and usage limits (plugin).

``install_compaction`` keeps each request under a token bound by writing
``context/compacted`` events (a surface ``Replace`` of the old history by one summary
message; the log keeps every original event). ``install_limits`` ends a turn ``blocked``
before it exceeds a step, tool-call or token limit. ``estimate_tokens(session)`` is the
estimate both use: the last reported input tokens plus a calibrated character count of
what was written since.
"""

from ..session import COMPACTION_PLUGIN
from ..session.events import ContextCompacted
from ._compaction import (
    COMPACTION_FAILED,
    CompactionFailed,
    CompactionStrategy,
    current_config,
    install_compaction,
)
from ._estimate import estimate_message_tokens, estimate_tokens
from ._limits import install_limits, session_usage

__all__ = [
    "COMPACTION_FAILED",
    "COMPACTION_PLUGIN",
    "CompactionFailed",
    "CompactionStrategy",
    "ContextCompacted",
    "current_config",
    "estimate_message_tokens",
    "estimate_tokens",
    "install_compaction",
    "install_limits",
    "session_usage",
]
