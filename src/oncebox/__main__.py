"""``python -m oncebox``."""

from oncebox.surfaces.cli import main

main()
