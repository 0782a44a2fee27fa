"""syncscope, as installed: see where an LLM decode loop's GPU waits on the host.

    syncscope.core       model loading, the naive and pipelined decode loops, the measurements, the sync audit
    syncscope.cli        the benchmark's command line (syncscope-bench)
    syncscope.engine     the engine process that runs the dashboard's jobs
    syncscope.dashboard  the Gradio page (the `dashboard` extra)
    syncscope.app        the `syncscope` command that serves it

The commands: `syncscope-audit` (syncscope.core.audit), `syncscope-bench` (syncscope.cli.bench; syncscope.core.bench
forwards to it), `syncscope`.
"""
