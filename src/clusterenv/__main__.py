"""``python -m clusterenv`` runs the CLI."""

from clusterenv.cli import main

raise SystemExit(main())
