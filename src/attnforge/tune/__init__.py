"""Tuning: ``attnforge tune`` searches a spec's TL parameters on a GPU (``search``) and keeps the
fastest verified choice in a database (``database``) that ``generate`` and ``attention()`` consult."""
