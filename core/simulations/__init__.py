"""Simulated rollouts and the constants behind every default.

``defaults`` holds each knob of the reference page's defaults table as a named constant with its source.
"""
