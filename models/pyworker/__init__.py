"""Family-independent machinery of the Python mediaserve workers (worker.py)."""
