"""Exports of a trace for other tools; none imports a framework."""
