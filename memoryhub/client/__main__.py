import sys

from memoryhub.client.cli import main

sys.exit(main())
