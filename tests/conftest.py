"""pytest's hook file for tests/. It holds no helpers: those are in helpers.py, a plain
module; pytest puts this directory on sys.path because this file is here, which is what
lets every tier `from helpers import ...`."""
