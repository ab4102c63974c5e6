"""A research runtime as its own process, for the tests of a run's end (X10, X11): a real
pydantic-ai ``Agent`` (``FunctionModel``, no provider) reports run ``argv[1]`` of account
``argv[2]`` through the runtime SDK over real Kafka, heartbeating every ``argv[3]`` seconds
while a call is in flight, inside the run's scope (``run_scope``): a stop request of its user,
heard on ``imprint.control.v1``, cancels the agent's run and ends it ``stopped``.

Its model writes plain text and one block in its first response, then, asked again, keeps
producing slowly — a line every second and never an answer — until the test kills the
process (X10) or the user stops the run (X11). What it has reached is printed (flushed) for
the test to read in its log: ``RUN STARTED``; ``BLOCK SETTLED`` once the Host told the tool
its block id; ``MODEL PRODUCING`` once the slow call is in flight; ``MODEL CANCELLED <unix
time>`` when the stop cancelled that call; ``RUN STOPPED`` once ``run.stopped`` was sent.

    python -m tests.e2e.slow_runtime <run_id> <account_id> <heartbeat_seconds>
"""

from __future__ import annotations

import asyncio
import sys
import time

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.runtime import RunWriter, run_scope
from imprint.runtime.kafka import KafkaControl, KafkaDecisions, KafkaTransport
from imprint.runtime.pydantic_ai import TOOL_NAME, AnswerPublication
from services.common.settings import Settings
from tests.support.agents import tool_returns

TEXT = "Water boils at 100 °C at sea level."
BLOCK = "At altitude it boils lower, about 93 °C at 2,000 m."


async def researcher(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    told = tool_returns(messages)
    if not told:
        return ModelResponse(parts=[TextPart(TEXT), ToolCallPart(TOOL_NAME, {"markdown": BLOCK},
                                                                 tool_call_id="call-1")])
    print(f"BLOCK SETTLED {told[0]}", flush=True)
    print("MODEL PRODUCING", flush=True)
    try:
        while True:  # a model that is still producing: the runtime lives, only heartbeats go out
            await asyncio.sleep(1.0)
    except asyncio.CancelledError:
        print(f"MODEL CANCELLED {time.time():.3f}", flush=True)
        raise


async def main(run_id: str, account_id: str, heartbeat_seconds: float) -> None:
    settings = Settings()
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as kafka, \
            KafkaDecisions(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as decisions, \
            KafkaControl(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as control:
        run = RunWriter(kafka, run_id)
        await run.admit(account_id=account_id, conversation_id=f"conv-{run_id}", message_id=f"msg-{run_id}",
                        question="At what temperature does water boil?")
        await run.queue()
        await run.start()
        print("RUN STARTED", flush=True)
        agent = Agent(FunctionModel(researcher))
        async with run_scope(run, control) as scope:
            await agent.run("At what temperature does water boil?",
                            capabilities=[AnswerPublication(run, decisions, settle_timeout=60,
                                                            heartbeat_seconds=heartbeat_seconds, scope=scope)])
        if scope.stopped:
            print("RUN STOPPED", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
