"""How every imprint log reads its stored JSON: eventsourcing's ``JSONTranscoder``, parsed
by pydantic-core.

The library's transcoder parses with the standard library's ``json`` and an
``object_hook`` that Python calls for every JSON object of every stored state (an event
of a committed block holds a dozen), to find the ``{"_type_": …, "_data_": …}`` objects
its transcodings wrote. pydantic-core's parser (already a dependency) builds the same
values with less work per object, and the hook's work is done only where the stored bytes
show a ``"_type_"`` key: in an event, usually just its ``timestamp``, at the top. It
caches the keys' strings only (``cache_strings="keys"``): values rarely repeat, and
looking each one up would cost more than it saves. orjson parses faster still but reads
an integer beyond 64 bits as a float, where this must read what the library reads.

What is written does not change (encoding is the library's), and neither does what is
read: the same transcodings decode the same objects, bottom up, and a document the fast
parser refuses (invalid UTF-8, a lone surrogate escape, anything else) is read by the
library's own decoder, with its own result or its own error. Selected with the library's
extension point, ``TRANSCODER_TOPIC`` (see :meth:`services.common.backends.Backend.environment`)."""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import JSONTranscoder as LibraryTranscoder
from pydantic_core import from_json

MARK = b'"_type_"'
"""The bytes of a transcoding's key. Inside a JSON string a quote is escaped, so each
occurrence is a key or a whole string value ``"_type_"``: their count bounds the objects
to decode."""


TIMESTAMP = "timestamp"
"""Where eventsourcing keeps an event's (and a snapshot's) time in its state."""


class JSONTranscoder(LibraryTranscoder):
    def __init__(self) -> None:
        super().__init__()
        self.decode_transcoded = self.decoder.object_hook
        """The library's own ``object_hook`` (of its public ``decoder``): a transcoded
        ``{"_type_": …, "_data_": …}`` object → its value, through the registered
        transcodings, with the library's errors; anything else as it is."""

    def decode(self, data: bytes) -> Any:
        try:
            value = from_json(data, cache_strings="keys")
        except ValueError:
            return super().decode(data)
        marks = data.count(MARK)
        if not marks:
            return value
        if type(value) is dict:
            if marks == 1 and _plain_transcoded(value.get(TIMESTAMP)):
                # An event (or snapshot) whose only transcoded value is its own timestamp.
                value[TIMESTAMP] = self._decode_plain(value[TIMESTAMP])
                return value
            # Usually every transcoded object sits right under the top with a plain value
            # as its data: then they are all there is to decode.
            top = [key for key, item in value.items() if _plain_transcoded(item)]
            if len(top) == marks:
                for key in top:
                    value[key] = self._decode_plain(value[key])
                return value
        return self._decode_within(value)

    def _decode_plain(self, item: dict[str, Any]) -> Any:
        """A :func:`_plain_transcoded` object's value, by its registered transcoding (what the
        library's hook does with it, without the hook's checks: they hold already); a name
        no transcoding has goes to the hook, for its error."""
        transcoding = self.names.get(item["_type_"])
        return self.decode_transcoded(item) if transcoding is None else transcoding.decode(item["_data_"])

    def _decode_within(self, value: Any) -> Any:
        """What the library's ``object_hook`` does, bottom up, over every object and list."""
        if type(value) is dict:
            for key, item in value.items():
                if type(item) is dict or type(item) is list:
                    value[key] = self._decode_within(item)
            return self.decode_transcoded(value)
        if type(value) is list:
            for index, item in enumerate(value):
                if type(item) is dict or type(item) is list:
                    value[index] = self._decode_within(item)
        return value


def _plain_transcoded(item: Any) -> bool:
    """A ``{"_type_": …, "_data_": …}`` object whose data holds nothing to decode first."""
    return (type(item) is dict and len(item) == 2 and "_type_" in item and "_data_" in item
            and type(item["_data_"]) is not dict and type(item["_data_"]) is not list)
