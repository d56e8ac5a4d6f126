"""`SandboxClient` (HTTP) and `PythonTool`, the code interpreter as an agent tool.

PythonTool runs on anything with `run(code, timeout_s) -> ExecutionResult`: a SandboxPool in
process or a SandboxClient talking to `agentic-rl serve-sandbox`. The client uses only urllib,
so rollout workers need no HTTP library. A service that cannot be reached, answers 5xx or
refuses access raises `SandboxUnreachable`, a ToolInfrastructureError: the episode is retried or
dropped, never trained on (tools/base.py). The token of a guarded service comes from `token` or
$AGENTIC_RL_API_TOKEN (tools/http_guard.py).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentic_rl.tools.base import ToolError, ToolInfrastructureError
from agentic_rl.tools.http_guard import resolve_token
from agentic_rl.tools.sandbox.limits import ExecutionResult


class CodeRunner(Protocol):
    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult: ...


class SandboxRequestError(RuntimeError):
    """The service refused the request (4xx) or could not be reached."""


class SandboxUnreachable(SandboxRequestError, ToolInfrastructureError):
    """The service could not be reached, failed (5xx), is busy or refused access."""


_INFRA_STATUS = {401, 403, 404, 408, 429}


class SandboxClient:
    """Client for the sandbox service (`POST /run`, `GET /health`)."""

    def __init__(self, url: str, connect_timeout_s: float = 10.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self.token = resolve_token(token)

    def _request(self, path: str, body: dict[str, Any] | None, timeout_s: float) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            try:
                detail = json.loads(err.read()).get("detail", "")
            except (ValueError, AttributeError):
                detail = ""
            kind = SandboxUnreachable if err.code >= 500 or err.code in _INFRA_STATUS else None
            message = f"sandbox service answered {err.code}: {detail}"
            raise (kind or SandboxRequestError)(message) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise SandboxUnreachable(f"sandbox service at {self.url} unreachable: {err}") from err

    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        body: dict[str, Any] = {"code": code}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        # The service may queue the request behind busy workers: wait well past the timeout.
        wait = (timeout_s or 60.0) * 2 + 30.0 + self.connect_timeout_s
        return ExecutionResult.from_dict(self._request("/run", body, wait))

    def health(self) -> dict[str, Any]:
        return self._request("/health", None, self.connect_timeout_s)


_FENCE = re.compile(r"^\s*```(?:python|py)?[^\n]*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def strip_code_fences(code: str) -> str:
    """`'```python\\nprint(1)\\n```'` -> `'print(1)'` (ReTool writes code in markdown fences)."""
    match = _FENCE.match(code)
    return match.group(1) if match else code


def format_result(result: ExecutionResult, timeout_s: float, max_chars: int = 2000) -> str:
    """What the model sees: stdout, then "Error: <last traceback line>" or the timeout, cut to
    `max_chars` from the head of stdout so the error line always survives."""
    if result.timed_out:
        cpu = "CPU time" in result.error
        tail = "Timed out: CPU time limit exceeded" if cpu else f"Timed out after {timeout_s:g} s"
    elif not result.ok:
        tail = f"Error: {result.error}"
    else:
        tail = ""
    stdout = result.stdout.rstrip("\n")
    room = max_chars - len(tail) - 1
    if len(stdout) > room:
        dropped = len(stdout) - max(room - 40, 0)
        stdout = stdout[: max(room - 40, 0)] + f"\n... [truncated {dropped} characters]"
    return "\n".join(part for part in (stdout, tail) if part)


@dataclass
class PythonTool:
    """Tool "python": runs the model's code in the sandbox and returns its output.

    The result tag is "interpreter" (ReTool's `<interpreter>...</interpreter>`). Code errors are
    ordinary results ("Error: NameError: ..."), not tool failures: the model should read them.
    """

    runner: CodeRunner
    timeout_s: float = 5.0
    max_chars: int = 2000
    name: str = "python"
    description: str = (
        "Run Python code in a fresh sandbox and see what it prints; the value of a bare last "
        "expression is printed too. No network, no files kept between calls."
    )
    parameters: dict[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run"}},
            "required": ["code"],
            "additionalProperties": False,
        }
    )
    result_tag: str = "interpreter"

    def __call__(self, code: str) -> str:
        if not isinstance(code, str) or not code.strip():
            raise ToolError("empty code")
        result = self.runner.run(strip_code_fences(code), self.timeout_s)
        if result.exit_code is None and not result.ok and not result.timed_out:
            raise ToolError(result.error)  # refused before running (e.g. code too large)
        return format_result(result, self.timeout_s, self.max_chars)
