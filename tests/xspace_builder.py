"""Builds small XSpace profiles for tests, with the full message schema."""

from __future__ import annotations

from typing import Any

from tpumem.xplane.schema import messages


def build_space(events: list[dict[str, Any]], plane: str = "/host:CPU") -> bytes:
    """events: {"name", "offset_ps", "stats": {name: value}}; int, float and str
    values, strings interned as references when given as ("ref", text)."""
    m = messages("full")
    space = m["XSpace"](hostnames=["testhost"])
    xplane = space.planes.add(id=1, name=plane)
    line = xplane.lines.add(id=1, name="python", timestamp_ns=1000)
    event_ids: dict[str, int] = {}
    stat_ids: dict[str, int] = {}

    def stat_id(name: str) -> int:
        if name not in stat_ids:
            stat_ids[name] = len(stat_ids) + 1
            xplane.stat_metadata[stat_ids[name]].id = stat_ids[name]
            xplane.stat_metadata[stat_ids[name]].name = name
        return stat_ids[name]

    for event in events:
        if event["name"] not in event_ids:
            event_ids[event["name"]] = len(event_ids) + 1
            meta = xplane.event_metadata[event_ids[event["name"]]]
            meta.id, meta.name = event_ids[event["name"]], event["name"]
        xevent = line.events.add(metadata_id=event_ids[event["name"]], offset_ps=event["offset_ps"])
        for name, value in event.get("stats", {}).items():
            stat = xevent.stats.add(metadata_id=stat_id(name))
            if isinstance(value, tuple):
                stat.ref_value = stat_id(value[1])
            elif isinstance(value, float):
                stat.double_value = value
            elif isinstance(value, str):
                stat.str_value = value
            elif value < 0:
                stat.int64_value = value
            else:
                stat.uint64_value = value
    return space.SerializeToString()
