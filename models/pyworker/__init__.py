"""Family-independent machinery of the Python mediaserve workers (worker.py names what an adapter uses)."""
