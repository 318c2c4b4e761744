"""``python -m sendonce_local.poller``: see process.py."""

import sys

from sendonce_local.poller.process import main

sys.exit(main())
