from gpucheckup.cli import main

raise SystemExit(main())
