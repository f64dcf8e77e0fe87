"""Message codecs: what a message becomes on the wire, in values and bytes
(docs/algorithms/compression.md)."""
