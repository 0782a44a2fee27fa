"""The syncscope web dashboard, in four layers, each a package whose imports tests/test_dashboard_layers.py checks:

- dashboard.service: the job service and the page's plain data (runner, queue, engine supervisor, jobs, history,
  page record, limits); no gradio, no plotly, never torch.
- dashboard.edge: the server's edge (request guard, sessions, Gradio's files, uploads, downloads, the bounded child
  that reads an uploaded audit); imports the service, never a view or the UI.
- dashboard.views: plain data in, plotly figures, table rows, text and HTML out (charts, timeline, summaries, the
  exported run); imports the service, never the edge or the UI, and no gradio.
- dashboard.ui: the Gradio page (`from dashboard.ui import build_demo, CSS`), its tabs and form; imports anything.

dashboard/export_html.py, the one module left here, only forwards `python -m dashboard.export_html` to
dashboard.views.export_html. dashboard/bundled/ holds the reports the page offers ready to open (app.py reads it).
"""
