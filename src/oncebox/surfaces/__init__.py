"""Surfaces: they translate between the outside world and the engine, and decide nothing."""
