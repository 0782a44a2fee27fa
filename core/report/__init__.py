"""A run's report: building it and its table from the trials (build), two reports side by side (diff) and a report
in plain words (explain). Above the loops, the models, the measurements and the audit, whose results it gathers;
the documents' schemas and files are core.documents. Imports nothing itself."""
