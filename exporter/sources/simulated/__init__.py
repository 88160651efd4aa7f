"""Simulated source: scenario presets played as a changing fleet (no GPU needed)."""
