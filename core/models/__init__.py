"""The models: which exist by name (specs, torch-free), where their weights come from (sources), how big they are
(size), whether they fit where they would run (memory, torch-free), loading one into a `LoadedModel` (loading) and
the random-weight ones (random_weights). Imports nothing itself, so that a torch-free module here loads alone."""
