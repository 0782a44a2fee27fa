"""The documents this project writes and reads (the bench report, the load report, the audit report, the page
report): their schemas, their keys as types and one way in (schema), and their files on disk, every read bounded
(files). Torch-free, and below everything that writes or reads one: models, measure, the audit and the report
import it, it imports none of them."""
