"""A conformance case's result and the report of a run of cases: a readable table and JSON.

Shared by the server kit and the client kit: each case names the rule it checks (an id of
docs/rules.md), whether it passed, and what was seen — enough for the reader to act on a failure
without rerunning it."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field


class Case(BaseModel):
    """One case's outcome."""

    model_config = ConfigDict(frozen=True)

    case: str = Field(description="the case id, stable across runs (family/variant)")
    rule: str = Field(description="the rule id it checks (docs/rules.md)")
    passed: bool
    seen: str = Field(default="", description="what was seen: the evidence, or why it failed and what to change")
    family: str = Field(default="", description="the family of cases it belongs to")
    seconds: float = 0.0


class Report(BaseModel):
    """The cases of one run, in the order they ran."""

    kit: str = Field(description="'server' or 'client'")
    target: str = Field(default="", description="the URL or adapter command the cases ran against")
    cases: list[Case] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="what the run did besides its cases, and what it did not check")

    def add(self, case: Case) -> Case:
        self.cases.append(case)
        return case

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(case.passed for case in self.cases)

    @property
    def failures(self) -> list[Case]:
        return [case for case in self.cases if not case.passed]

    def counts(self) -> dict[str, int]:
        return {"total": len(self.cases), "passed": sum(c.passed for c in self.cases),
                "failed": len(self.failures)}

    def by_family(self) -> dict[str, tuple[int, int]]:
        """family → (passed, total)."""
        total = Counter(case.family or case.case.split("/")[0] for case in self.cases)
        passed = Counter(case.family or case.case.split("/")[0] for case in self.cases if case.passed)
        return {family: (passed[family], count) for family, count in total.items()}

    def to_json(self) -> str:
        return json.dumps({**self.model_dump(mode="json"), **self.counts(), "ok": self.passed}, indent=2)

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    def render(self, *, only_failures: bool = False, width: int | None = None) -> str:
        """A table: case, rule, pass/fail, what was seen (wrapped); then a line per family and the total."""
        width = width or max(100, shutil.get_terminal_size((120, 20)).columns)
        shown = self.failures if only_failures else self.cases
        case_width = min(48, max([len(c.case) for c in shown] + [4]))
        seen_width = max(30, width - case_width - 14)
        lines = [f"imprint conformance {self.kit}" + (f" — {self.target}" if self.target else ""), ""]
        lines.append(f"{'case':<{case_width}}  {'rule':<4}  {'':<4}  seen")
        for case in shown:
            wrapped = textwrap.wrap(case.seen, seen_width) or [""]
            lines.append(f"{case.case:<{case_width}}  {case.rule:<4}  {'ok' if case.passed else 'FAIL':<4}  {wrapped[0]}")
            lines.extend(f"{'':<{case_width + 14}}{more}" for more in wrapped[1:])
        lines.append("")
        lines.extend(f"note: {note}" for note in self.notes)
        for family, (passed, total) in self.by_family().items():
            lines.append(f"  {family:<24} {passed}/{total}")
        counts = self.counts()
        lines.append(f"{counts['passed']}/{counts['total']} passed, {counts['failed']} failed")
        return "\n".join(lines)

    def print(self, stream: TextIO, *, only_failures: bool = False) -> None:
        stream.write(self.render(only_failures=only_failures) + "\n")
