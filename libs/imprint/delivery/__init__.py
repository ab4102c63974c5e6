"""Delivery's pure domain: the per-run answer view (P16/P17/P18/P21), the frames a
client receives (D2) and the stream summary / terminal validation (D3), how a
resumed stream starts and when it starts over (D8, :mod:`.reset`), the same frames as AI SDK
UI message parts (:mod:`.ui_message_stream`), stream tickets (D6, :mod:`.tickets`), how an
execution is presented (D5, :mod:`.execution`), and a withdrawal after a run's end told to its
conversation and who saw the withdrawn claim (D7, :mod:`.notices` and :mod:`.seen`), the
rows one poll holds and appends to in memory (D1, :mod:`.rows`) and the live feeds' keys
(:mod:`.feeds`).

No HTTP, SQL or Kafka here: ``services/delivery`` persists and serves what these
functions decide."""
