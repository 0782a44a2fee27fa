"""The dashboard's job service and its plain data: the runner (one queue in front of the engine process), the engine
supervisor, jobs, fair share, the live views of a run, the run history, the page record, limits and model policy,
the load form's values, and the readers of a report's data (audit digest, load report sentences). No gradio, no
plotly, never torch; nothing of dashboard.edge, dashboard.views or dashboard.ui (tests/test_dashboard_layers.py)."""
