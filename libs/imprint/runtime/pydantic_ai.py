"""imprint for pydantic-ai agents (extra ``imprint[agent]``): both entries of P1.

:class:`AnswerPublication` is a pydantic-ai capability for one run. It

* gives the agent the ``send_answer_part`` tool (entry B, ``answer.part``), which
  tells the model the block ids the Host issued so it can revise a block later;
* forwards the plain text of every model response (entry A, ``answer.text``) before
  that response's tool calls run, so text and blocks keep the order the model wrote
  them in — also when one response carries both.

X10: while a model request or a tool call is in flight it sends ``run.heartbeat`` whenever
the run has been silent for ``heartbeat_seconds`` (:class:`~imprint.runtime.heartbeat.Heartbeats`),
so a slow model or a long tool keeps the run's lease at the Journal, and a runtime that
dies stops renewing it.

X11: given the run's scope (:func:`~imprint.runtime.stopping.run_scope`), the agent's run is
stoppable by its user. A stop request cancels the task running the agent — the model request or
tool call in flight with it — and the scope ends the run ``stopped``; the capability's heartbeats
end with it, and it starts no model request or tool call once the stop was requested (should
some code under the agent have swallowed the cancellation)::

    async with run_scope(writer, control) as scope:
        await agent.run(prompt, capabilities=[AnswerPublication(writer, decisions, scope=scope)])

X12: a question the conversation's ``steer`` policy hands to the running run (``run.steered``,
kept by the scope) joins the agent's next model request as the user's words.

Pass it per run: ``await agent.run(prompt, capabilities=[AnswerPublication(writer, decisions)])``
(``agent.iter`` and an ``event_stream_handler`` work alike; under ``agent.run_stream`` pydantic-ai
takes the first text as the final output and runs its tool calls first, so that order is not kept).
Without ``decisions`` the tool still sends, but cannot tell the model any block id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.toolsets import FunctionToolset

from imprint.contracts.publication import (
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerSaveFailed,
    AnswerUnchanged,
)
from imprint.contracts.runtime import BlockDraft, TableContent
from imprint.publication.candidate import candidate_id_for
from imprint.runtime.decisions import Decision, Decisions
from imprint.runtime.heartbeat import DEFAULT_EVERY, Heartbeats, InFlight
from imprint.runtime.stopping import RunScope
from imprint.runtime.writer import RunWriter

TOOL_NAME = "send_answer_part"
STEERED = "The user added while you were answering: {question}"
"""X12: how a steered question reaches the model (before its next request)."""


def turn_of(ctx: RunContext[Any]) -> str:
    """The model turn (one model response) a text part or tool call belongs to."""
    return f"turn-{ctx.run_step}"


@dataclass
class AnswerPublication(AbstractCapability[Any]):
    writer: RunWriter
    decisions: Decisions | None = None
    settle_timeout: float = 15.0
    """How long the tool waits for the Host's decisions before answering the model without them."""
    heartbeat_seconds: float | None = DEFAULT_EVERY
    """X10: silence after which a ``run.heartbeat`` goes out while a model request or tool call
    is in flight (``None``: no heartbeats). Keep it well under the deployment's run lease."""
    scope: RunScope | None = None
    """X11: the run's scope, when its user may stop it (:func:`~imprint.runtime.stopping.run_scope`)."""
    _heartbeats: Heartbeats | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.heartbeat_seconds is not None:
            self._heartbeats = Heartbeats(self.writer, self.heartbeat_seconds)
            if self.scope is not None:
                self.scope.adopt(self._heartbeats)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live writer

    def get_toolset(self) -> FunctionToolset[Any]:
        return FunctionToolset([self._tool()])

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        """X12: a question steered into the run since the last request joins this one, as the user's
        words (kept in the run's history)."""
        if self.scope is None:
            return request_context
        for steered in self.scope.take_steered():
            last = ctx.messages[-1] if ctx.messages else None
            part = UserPromptPart(STEERED.format(question=steered.question or ""))
            if isinstance(last, ModelRequest):
                last.parts = [*last.parts, part]
            else:
                ctx.messages.append(ModelRequest(parts=[part]))
                request_context.messages.append(ctx.messages[-1])
        return request_context

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: Any,
                                  response: ModelResponse) -> ModelResponse:
        texts = [part.content for part in response.parts if isinstance(part, TextPart) and part.content.strip()]
        for segment, text in enumerate(texts):
            await self.writer.text(text, turn_id=turn_of(ctx), segment=segment)
        return response

    async def wrap_model_request(self, ctx: RunContext[Any], *, request_context: Any, handler: Any) -> Any:
        async with self._alive("model"):
            return await handler(request_context)

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: Any, tool_def: Any, args: Any,
                                handler: Any) -> Any:
        async with self._alive("tool"):
            return await handler(args)

    @asynccontextmanager
    async def _alive(self, in_flight: InFlight) -> AsyncIterator[None]:
        if self.scope is not None:
            self.scope.check()  # a stopped run starts nothing new
        async with self._heartbeats.during(in_flight) if self._heartbeats is not None else nullcontext():
            yield

    def _tool(self) -> Any:
        publication = self

        async def send_answer_part(ctx: RunContext[Any], markdown: str | None = None, replaces: str | None = None,
                                   table: TableContent | None = None, blocks: list[BlockDraft] | None = None) -> str:
            """Publish part of your answer to the user as a block, or revise a block you published earlier.

            Each call proposes one block (``markdown`` or ``table``) or several (``blocks``). The Host checks
            every block on its own, commits it and answers with its block id, e.g. ``blk_0123…``. To revise
            a block you published, call again with ``replaces`` set to its block id: the block changes in
            place and keeps its position; nothing is added. Cite a
            granted source with ``[[cite:<full source id>]]``, render an issued number with
            ``[[num:<handle id>]]`` and build on another block with ``[[ref:<block id>]]``.

            Args:
                markdown: The block's text (Markdown).
                replaces: To revise an earlier block in place instead of adding a new one, the block id the
                    Host gave you for it (``blk_…``). The new text replaces that block where it stands; it
                    does not add a block. Leave it out for a new block. Only ids the Host issued in this run
                    work; a revision of anything else is rejected and the earlier block stays as it was.
                table: A table block instead of markdown: ``columns`` and ``rows`` of strings.
                blocks: Several blocks in one call, each with its own ``markdown`` or ``table`` and optional
                    ``replaces``.
            """
            arguments: dict[str, Any] = {"markdown": markdown, "replaces": replaces,
                                         "table": table.model_dump() if table else None,
                                         "blocks": [b.model_dump(exclude_defaults=True) for b in blocks]
                                         if blocks is not None else None}
            return await publication.send(ctx, {k: v for k, v in arguments.items() if v is not None})

        return send_answer_part

    async def send(self, ctx: RunContext[Any], arguments: dict[str, Any]) -> str:
        """Send one ``send_answer_part`` call, its tool receipt, and describe the Host's decisions."""
        tool_call_id = ctx.tool_call_id or ""
        run_id = self.writer.run_id
        candidate_id = candidate_id_for("tool", tool_call_id)
        awaited = self.decisions.expect(run_id, candidate_id) if self.decisions else None
        try:
            proposal = await self.writer.send_answer_part(arguments, tool_call_id=tool_call_id, turn_id=turn_of(ctx))
            await self.writer.tool_receipt(tool_call_id, "ok")
            if awaited is None:
                return f"Sent ({proposal.candidate_id}); the Host settles it, its block ids are not reported here."
            decisions = await awaited.expecting(proposal.blocks).wait(self.settle_timeout)
        finally:
            if self.decisions:
                self.decisions.forget(run_id, candidate_id)
        if not decisions:
            return "Sent; the Host has not settled it yet, so no block id is known."
        return "\n".join(describe(d) for d in decisions)


def describe(decision: Decision) -> str:
    """One Host decision, in words a model can act on."""
    if isinstance(decision, AnswerPublished):
        block = decision.block
        verb = "committed" if block.revision == 1 else "revised in place"
        return (f"Block {block.block_id} {verb} (revision {block.revision}, position {block.delivery_ordinal}, "
                f"{block.source_hint}).")
    if isinstance(decision, AnswerUnchanged):
        return f"Block {decision.block_id} unchanged: identical to revision {decision.revision}."
    if isinstance(decision, AnswerRejected):
        return f"Block {decision.block_index + 1} of this call rejected: {decision.reason}."
    if isinstance(decision, AnswerRevisionRejected):
        return f"Revision of {decision.target_block_id} rejected: {decision.reason}; that block is unchanged."
    if isinstance(decision, AnswerSaveFailed):
        return "The Host could not save this call; nothing from it is committed."
    return "The Host could not confirm saving this call; whether it is committed is unknown."
