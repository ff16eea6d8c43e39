"""Renderers of one results document: terminal, JSON, HTML, the timeline and a comparison of two
runs. They read only the document; hybrid.report.common holds what they share."""
