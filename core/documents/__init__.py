"""The documents this project writes and reads (the bench report, the load report, the audit report, the page
report): one way in (schema), their kinds (kinds), their keys as types and checks (a module per kind), the upgrades
of old ones (upgrades), and their files on disk, every read bounded (files). Torch-free, and below everything that
writes or reads one: models, measure, the audit and the report import it, it imports none of them."""
