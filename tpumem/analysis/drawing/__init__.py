"""What a page draws: a device's memory over time at each zoom, the moments a
click lists, the largest buffers over their lives, the timeline's bins."""
