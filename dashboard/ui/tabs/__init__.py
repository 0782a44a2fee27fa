"""The page's tabs, a module each: Compare (the live A/B run, its form in dashboard.ui.form), its History section (the
visitor's runs, their downloads, two of them diffed), Replay (a report file), and Your loop (an audit file)."""
