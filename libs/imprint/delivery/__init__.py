"""Delivery's pure domain: the per-run answer view (P16/P17/P18/P21), the frames a
client receives (D2) and the stream summary / terminal validation (D3).

No HTTP, SQL or Kafka here: ``services/delivery`` persists and serves what these
functions decide."""
