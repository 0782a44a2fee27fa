"""`python -m dashboard.export_html REPORT.json[.gz] OUT.html`: the command, kept at this name (core.bench --html and
the docs run it); its code is dashboard.views.export_html. Only a forwarder: tests/test_dashboard_layers.py allows it
at dashboard/'s top level."""

from dashboard.views.export_html import main

if __name__ == "__main__":
    raise SystemExit(main())
