"""The Profile to results: metrics, roofline, kernel classes, then the diagnosis and the stages after the
rules."""
