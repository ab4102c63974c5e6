"""What a scripted pydantic-ai model (``FunctionModel``) reads back from the agent's
history: the tests' agents decide their next step by the tool returns they were told."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart


def tool_returns(messages: list[ModelMessage]) -> list[str]:
    """Every tool return the model was told so far, oldest first, as text."""
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]
