from benchmarks.hardbyte.adapter import main

raise SystemExit(main())
