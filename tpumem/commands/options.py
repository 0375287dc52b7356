"""Options given as text, in the units people write: sizes, capacities, TPU
topologies; one clear line for anything that is not one."""

from __future__ import annotations


def parse_size(option: str, text: str | None) -> int | None:
    """An option's size in bytes (12GiB, 800MB, bytes); one clear line for
    anything that is not one."""
    if text is None:
        return None
    from tpumem.errors import TpumemError
    from tpumem.units import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as error:
        raise TpumemError(f"{option}: {error}") from None


def parse_capacity(text: str | None) -> int | None:
    """--capacity's bytes: a size above 0."""
    size = parse_size("--capacity", text)
    if size is not None and size <= 0:
        from tpumem.errors import TpumemError

        raise TpumemError("--capacity: give a size above 0")
    return size


def parse_topologies(names: list[str] | None) -> list:
    """--tpu's topologies, checked before any work starts."""
    from tpumem.tpu.topology import parse_topology

    return [parse_topology(name) for name in names or []]
