"""The marker protocol: markers, framing and scenarios.  No processes, no threads."""

from etlstage.protocol.framing import (
    BNC,
    EOB,
    EOP,
    Bncs,
    Checked,
    ReplyParser,
    RequestParser,
    Signal,
    check_block_for,
    check_messages,
    checked,
    encode_block,
    reframe,
    split_block,
)
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers, parse_marker
from etlstage.protocol.scenario import Scenario

__all__ = [
    "BNC",
    "DEFAULT_MARKERS",
    "EOB",
    "EOP",
    "Bncs",
    "Checked",
    "Markers",
    "ReplyParser",
    "RequestParser",
    "Scenario",
    "Signal",
    "check_block_for",
    "check_messages",
    "checked",
    "encode_block",
    "parse_marker",
    "reframe",
    "split_block",
]
