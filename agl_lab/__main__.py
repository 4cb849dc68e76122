from agl_lab.cli import main

raise SystemExit(main())
