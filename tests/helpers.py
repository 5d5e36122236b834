"""Helpers shared by the tests."""
import os


def snapshot(path):
    """Every file and directory under ``path`` with its size and modification time."""
    if not os.path.exists(path):
        return None
    return {os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size, os.stat(os.path.join(d, f)).st_mtime_ns)
            for d, dirs, files in os.walk(path) for f in files + dirs}
