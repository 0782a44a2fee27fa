"""Plain-data views: a report, a run's state or an audit digest in, plotly figures, table rows, Markdown text or HTML
out (charts, timeline, summaries, report text, audit and load views, the exported run and its command). Imports
dashboard.service's data types, never dashboard.edge or dashboard.ui, and no gradio (tests/test_dashboard_layers.py)."""
