"""Builds small XSpace profiles for tests, with the full message schema."""

from __future__ import annotations

from typing import Any

from tpumem.xplane.schema import messages


def build_space(
    events: list[dict[str, Any]],
    plane: str = "/host:CPU",
    session: tuple[int, int] | None = None,
    signed: bool = False,
) -> bytes:
    """events: {"name", "offset_ps", "stats": {name: value}}; int, float and str
    values, strings interned as references when given as ("ref", text). `session`:
    the profiler session's (start, stop) in ns since the epoch, written as TSL
    does on a "Task Environment" plane; event times are relative to its start.
    `signed`: every int as int64_value, as TSL writes memory events' stats (XProf
    reads those stats' int64 values only); else non-negative ints as uint64."""
    m = messages("full")
    space = m["XSpace"](hostnames=["testhost"])
    if session is not None:
        environment = space.planes.add(id=2, name="Task Environment")
        for key, (name, value) in enumerate(
            (("profile_start_time", session[0]), ("profile_stop_time", session[1])), start=1
        ):
            environment.stat_metadata[key].id = key
            environment.stat_metadata[key].name = name
            environment.stats.add(metadata_id=key, uint64_value=value)
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
            elif value < 0 or signed:
                stat.int64_value = value
            else:
                stat.uint64_value = value
    return space.SerializeToString()
