"""Analyses over recorded traces: serving metrics and the statistics of paired comparisons."""
