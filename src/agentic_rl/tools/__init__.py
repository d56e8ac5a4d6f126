"""Tools the agent can call: a protocol, safe calling, and the built-in tools."""

from agentic_rl.tools.base import (
    FunctionTool,
    Tool,
    ToolError,
    ToolOutcome,
    call_tool,
    result_tag_of,
    validate_arguments,
)
from agentic_rl.tools.calculator import Calculator
from agentic_rl.tools.search import BM25Search

__all__ = [
    "BM25Search",
    "Calculator",
    "FunctionTool",
    "Tool",
    "ToolError",
    "ToolOutcome",
    "call_tool",
    "result_tag_of",
    "validate_arguments",
]
