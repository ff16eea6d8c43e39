"""What-if replay of the measured step: build a graph from the Profile (graph), replay it
(simulate), apply a fix to it (transforms) and replay again; the difference is what the fix saves."""
