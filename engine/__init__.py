"""The engine processes and the pipe to them: both ends, the messages they exchange, and how they are started.

    protocol  the requests and replies, one dataclass each, and their one enum of message types
    process   the engine process's side: EngineCore (load, compare, report) and `serve`, its main
    client    the server's side: start the processes, send requests, notice deaths and hangs
    inprocess EngineCore on a thread of the server, behind the client's interface (tests, --engine-in-process)

What every spawned engine or rank shares (the environment defaults, a free port, the spawn context) is in
core.parallel.launch; `python -m core.bench --tp N` without torchrun is core.parallel.ranks.

Importing this package or any of its modules imports no torch (nor gradio, nor plotly): the server imports them.
Only an engine process imports torch, when it loads a model (or the server itself, when its engine runs in-process).
"""
