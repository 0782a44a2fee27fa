"""What building syncscope's distribution needs beside setup.py (nothing here is installed)."""
