"""The benchmark's command line, `python -m core.bench` (and `syncscope-bench`): an entry point beside app.py, above
core (what it runs) and dashboard.views (the run as one HTML file, --html). bench: the flags and a single run's
compare, table and files; load: a run under load (--requests N); common: what both share (signals, one-line
errors, the HTML file). core/bench.py forwards the command here."""
