from fedcore.cli import main

raise SystemExit(main())
