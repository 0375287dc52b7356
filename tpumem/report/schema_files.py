"""The JSON schemas tpumem publishes (tpumem/report/schemas/), generated from the
shapes that write each JSON: a schema file is never edited by hand.

`python -m tpumem.report.schema_files` writes them; tests/unit/test_json_schema.py
fails while a file differs from what its shape generates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tpumem.report.json_shapes import Shape, document

FOLDER = Path(__file__).resolve().parent / "schemas"
# Versions tpumem no longer writes, kept as they were published for the programs
# that read documents written under them (never generated again, never deleted).
SUPERSEDED = ("tpumem-diff-1.json", "tpumem-run-1.json")


def _shapes() -> dict[str, Shape]:
    """Each schema's id and the shape that writes its JSON (imported here, not at
    start-up: the CLI's JSON commands import only their own)."""
    from tpumem.report.compare_json import COMPARE_SCHEMA, COMPARISON
    from tpumem.report.diff_report import DIFF, DIFF_SCHEMA
    from tpumem.report.json_report import PROGRAM_REPORT, PROGRAM_SCHEMA, REPORT, SCHEMA
    from tpumem.report.run_json import RUN, RUN_SCHEMA

    return {
        SCHEMA: REPORT,
        PROGRAM_SCHEMA: PROGRAM_REPORT,
        COMPARE_SCHEMA: COMPARISON,
        DIFF_SCHEMA: DIFF,
        RUN_SCHEMA: RUN,
    }


def file_name(schema_id: str) -> str:
    """ "tpumem-report/1" -> "tpumem-report-1.json"."""
    return schema_id.replace("/", "-") + ".json"


def generated() -> dict[str, dict[str, Any]]:
    """Each schema file's name and its contents."""
    documents = {}
    for schema_id, shape in _shapes().items():
        title = getattr(shape, "title", "") or schema_id
        documents[file_name(schema_id)] = document(shape, schema_id, title)
    return documents


def text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    documents = generated()
    for stale in FOLDER.glob("*.json"):
        if stale.name not in documents and stale.name not in SUPERSEDED:
            stale.unlink()
    for name, schema in documents.items():
        (FOLDER / name).write_text(text(schema), encoding="utf-8")
        print(f"wrote {FOLDER / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
