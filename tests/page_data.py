"""The data an HTML page of tpumem's embeds, read back as the page's script reads it."""

from __future__ import annotations

import json
import re

from tpumem.report.html import DATA_ID


def embedded(page: str) -> dict:
    found = re.search(
        rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, re.DOTALL
    )
    assert found, "no embedded data"
    return json.loads(found.group(1))
