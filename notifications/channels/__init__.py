"""The channels' senders: each takes a claimed delivery (and its call, if any) and sends it, outside any transaction.

A sender raises ChannelError when the channel did not take the message; the delivery
is then tried again with backoff. What it returns is kept on the delivery (Slack: the
message's channel and ts, to update it in place later).
"""

from __future__ import annotations


class ChannelError(Exception):
    """The channel did not take the message (down, refused, misconfigured); the message says why."""
