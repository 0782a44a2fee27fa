"""The bench report and everything that reads one: its schema and one way in for every document this project writes
(schema), building a run's report and its table (build), the files on disk (files), two reports side by side (diff)
and a report in plain words (explain). Imports nothing itself; schema, files and explain are torch-free."""
