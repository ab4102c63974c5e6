"""X11 — Stop: a user's cancel request is a recorded fact of the run.

Delivery puts ``run.cancel_requested`` {account_id} on ``imprint.control.v1`` for a run
it owns to that account; the Journal records it on the execution as ``StopRequested``
(once), the runtime SDK cancels the run's work and sends ``run.stopped``, and the
Journal's ``stopped`` transition then carries the reason ``stop_requested``. Who owns what:

* the request — the Journal (``StopRequested``; announced nowhere: Delivery answered the
  user already, and the runtime hears the request on the control topic itself);
* the end — the runtime (``run.stopped`` naming the request it answers, an ordinary
  transition, X2);
* what stays — Publication: every proposal the runtime sent before ``run.stopped`` is
  settled, none after it.

Which requests are recorded (:func:`check_stop_request`):

* an open run (admitted, queued, running) of the requesting account: recorded, once — a
  second request while the first is pending adds nothing;
* a run that already ended: nothing changes and nothing is recorded (Delivery answers
  such a request 409 before it is ever sent; one that raced the end is moot);
* the request and the runtime's ``run.stopped`` travel on different topics, so the Journal
  often reads the stop first. The SDK's ``run.stopped`` names the request it answers
  (``cancel_request_id``): the Journal then records the request from it — under the
  request's own ``event_id``, before the transition — and the request's own message, when it
  arrives, is a redelivery that changes nothing. Either order records the same fact once;
* a run never admitted, or another account's: refused and recorded.
"""

from __future__ import annotations

from imprint.journal.lifecycle import LIVE, State
from imprint.journal.refusals import Refusal, RefusalCode


def check_stop_request(state: State | None, owner: str | None, account_id: str, already: bool) -> bool:
    """Whether a stop request of ``account_id`` is recorded on a run in ``state`` owned by
    ``owner`` (``already``: one was recorded before). Raise a :class:`Refusal` for one that
    must be refused and recorded."""
    if state is None or owner is None:
        raise Refusal(RefusalCode.NOT_ADMITTED, "run.cancel_requested before admission")
    if owner != account_id:
        raise Refusal(RefusalCode.ACCOUNT_MISMATCH, "the run belongs to another account")
    return state in LIVE and not already
