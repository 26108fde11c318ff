"""``mambaxfer schema``: the JSON Schema of each document the tool emits."""

from __future__ import annotations

from enum import Enum

from mambaxfer_cli.cli.params import argument, command
from mambaxfer_cli.cli.report import Report, finish
from mambaxfer_cli.schema import DOCUMENTS

# Its members are DOCUMENTS' names, which mypy cannot read from a functional Enum call.
Document = Enum("Document", {name: name for name in DOCUMENTS}, type=str)  # type: ignore[misc]


@command()
def schema(
    document: str | None = argument(
        "document", help="Which document: plan (plan --format json/--output), check, execute, inspect, models, "
                         "preflight, bench or conformance (their --format json); sglang-plan, sglang-check, "
                         "sglang-inspect, sglang-execute, sglang-bench (the same with --engine sglang), "
                         "check-engines (check --engine vllm,sglang), bench-engines (bench --engine "
                         "vllm,sglang); none: the list of them.",
        type=Document, default=None),
) -> None:
    """Print the JSON Schema (draft 2020-12) of a document mambaxfer emits (mambaxfer.NAME/v1).

    [bold]Examples[/]

    mambaxfer schema plan > plan-v1.schema.json

    mambaxfer schema check

    mambaxfer schema (no name) lists the documents.
    """
    from mambaxfer_cli.schema import schema_text

    if document is None:
        finish(SchemaText("mambaxfer schema NAME prints one of these documents' JSON Schema:\n"
                          + "".join(f"  {name:<15} mambaxfer.{name}/v1\n" for name in DOCUMENTS)))
    else:
        finish(SchemaText(schema_text(getattr(document, "value", document))))


class SchemaText(Report):
    """A schema: its text, printed as it is."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def render(self, width: int) -> list[str]:
        return [self.text]
