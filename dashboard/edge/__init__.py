"""The server's edge: what a visitor's requests may cost before Gradio sees them (http_guard, request_bodies,
session_store), Gradio's files and the page's downloads (gradio_files, downloads, session_copies), and reading what a
visitor uploads (uploads; audit_process, the bounded child that reads an audit). Imports dashboard.service, never
dashboard.views or dashboard.ui (tests/test_dashboard_layers.py); this package itself imports no gradio."""
