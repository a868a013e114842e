"""``oncebox serve``, defined beside the HTTP service (surfaces/serve.py), added to the
group when it runs."""

from oncebox.surfaces.cli.base import cli
from oncebox.surfaces.serve import serve

cli.add_command(serve)
