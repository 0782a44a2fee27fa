"""What a run asks for, checked without torch: the generation options, the benchmark request and the table of run
options (options), and that table put to work as the CLI's flags, values by name and the command that repeats a
request (run_schema); a run under load's likewise: its contestants, the load-option table, the workload's spec and
the LoadRequest (load), that table put to work (load_schema), and a workload's requests drawn from its spec
(workload). Imports nothing itself: the dashboard's server reads these without torch."""
