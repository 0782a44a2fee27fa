"""The syncscope web dashboard: gradio page (ui), plotly figures (charts) and the headless runner."""
