"""Monitoring: metrics, status, the progress display and the report."""
