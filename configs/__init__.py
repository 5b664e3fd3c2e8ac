"""Reusable recipe blocks shipped with whileai (grader presets, judge prompts, trainer defaults, launch files).

Recipes name them under ``include:``; this package holds data only.
"""
