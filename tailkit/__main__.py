import sys

from tailkit._entry import main


sys.exit(main())
