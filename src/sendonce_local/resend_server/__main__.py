import sys

from sendonce_local.resend_server.cli import main

sys.exit(main())
