"""Artifacts to the normalized Profile: the nsys export, the torch trace, ncu's counters, and the steps of a
capture without marks."""
