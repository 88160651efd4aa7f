"""Allow ``python -m exporter``."""

from exporter.entry import main

raise SystemExit(main())
